// A Ulysses (sequence-parallel) attention block with fluxcpp::GemmA2aTranspose and
// fluxcpp::A2aTransposeGemm, checked against the same block computed on one rank.
//
// Each rank holds a slice of the sequence, x [bs, seq/W, hidden]. The Q, K and V projections
// followed by an all-to-all give each rank nheads/W heads over the whole sequence,
// [bs, nheads/W, seq, head_dim]; attention over the full sequence then needs no communication;
// an all-to-all back followed by the output projection gives each rank its slice of the
// sequence again, [bs, seq/W, hidden].
//   mpirun -np 2 build/python-free-examples/fluxcpp_example_ulysses
#include <fluxcpp/fluxcpp.hpp>

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

// Deterministic values in [-scale, scale): the same on every rank.
std::vector<float> random_tensor(int64_t count, unsigned seed, float scale) {
  std::mt19937 gen(seed);
  std::vector<float> v(count);
  for (float& x : v) x = scale * static_cast<float>(gen() / 2147483648.0 - 1.0);
  return v;
}

// out [m, n] = a [m, k] · wᵀ, w [n, k] (a Linear layer without bias).
std::vector<float> linear(const float* a, const std::vector<float>& w, int64_t m, int64_t n,
                          int64_t k) {
  std::vector<float> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t l = 0; l < k; ++l) acc += double(a[i * k + l]) * w[j * k + l];
      out[i * n + j] = static_cast<float>(acc);
    }
  return out;
}

// Non-causal scaled dot-product attention of one head. q, k, v and o are [seq, head_dim] with
// consecutive rows `stride` elements apart.
void attend(const float* q, const float* k, const float* v, float* o, int64_t seq, int64_t head_dim,
            int64_t stride) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> p(seq);
  for (int64_t t = 0; t < seq; ++t) {
    double max_score = -INFINITY, sum = 0.0;
    for (int64_t u = 0; u < seq; ++u) {
      double dot = 0.0;
      for (int64_t d = 0; d < head_dim; ++d) dot += double(q[t * stride + d]) * k[u * stride + d];
      p[u] = dot * scale;
      max_score = std::max(max_score, p[u]);
    }
    for (int64_t u = 0; u < seq; ++u) sum += (p[u] = std::exp(p[u] - max_score));
    for (int64_t d = 0; d < head_dim; ++d) {
      double acc = 0.0;
      for (int64_t u = 0; u < seq; ++u) acc += p[u] * v[u * stride + d];
      o[t * stride + d] = static_cast<float>(acc / sum);
    }
  }
}

}  // namespace

// --help prints this; it is handled before MPI starts, so it also works without mpirun.
const char kUsage[] =
    "usage: mpirun -np N fluxcpp_example_ulysses [--help]\n"
    "A Ulysses attention block (GemmA2aTranspose -> softmax attention over the local heads ->\n"
    "A2aTransposeGemm) checked against the same block computed on one rank; rank 0 prints ok or\n"
    "WRONG with the largest error. Any number of ranks (the shapes scale with it).\n"
    "Exit status 0 when the result is right, nonzero otherwise.\n";

int main(int argc, char** argv) {
  if (argc > 1) {  // the only argument is --help
    const bool help = !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h");
    if (!help) std::fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], argv[1]);
    std::fputs(kUsage, help ? stdout : stderr);
    return help ? 0 : 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  try {
    fluxcpp::Context ctx(MPI_COMM_WORLD);  // collective
    const int W = ctx.world_size(), r = ctx.rank();
    const int64_t bs = 2, seq = 8 * W, nheads = 2 * W, head_dim = 16, hidden = 64;
    const int64_t sl = seq / W, hpr = nheads / W, c = nheads * head_dim;  // c: all heads' columns

    // The whole input and the weights, the same on every rank; this rank keeps its slice of x.
    const float ws = 1.0f / std::sqrt(static_cast<float>(hidden));
    const std::vector<float> x = random_tensor(bs * seq * hidden, 1, 1.0f);
    const std::vector<float> wq = random_tensor(c * hidden, 2, ws),
                             wk = random_tensor(c * hidden, 3, ws),
                             wv = random_tensor(c * hidden, 4, ws),
                             wo = random_tensor(hidden * c, 5, ws);
    std::vector<float> x_local(bs * sl * hidden);
    for (int64_t b = 0; b < bs; ++b)
      std::copy_n(&x[(b * seq + r * sl) * hidden], sl * hidden, &x_local[b * sl * hidden]);

    // Before attention: projection + all-to-all, [bs, seq/W, hidden] -> [bs, nheads/W, seq, hd].
    // One op serves Q, K and V: same shapes, three forwards.
    fluxcpp::GemmA2aTransposeOptions qkv_opts;
    qkv_opts.max_bs = bs;
    qkv_opts.max_seq = seq;
    qkv_opts.hidden = hidden;
    qkv_opts.nheads = nheads;
    qkv_opts.head_dim = head_dim;
    fluxcpp::GemmA2aTranspose qkv_proj(ctx, qkv_opts);  // collective
    std::vector<float> q(bs * hpr * seq * head_dim), k(q.size()), v(q.size()), o(q.size());
    qkv_proj.forward(x_local.data(), bs, seq, wq.data(), nullptr, q.data());  // collective
    qkv_proj.forward(x_local.data(), bs, seq, wk.data(), nullptr, k.data());
    qkv_proj.forward(x_local.data(), bs, seq, wv.data(), nullptr, v.data());

    // Attention over the whole sequence for this rank's heads: purely local.
    for (int64_t bh = 0; bh < bs * hpr; ++bh) {
      const int64_t off = bh * seq * head_dim;
      attend(&q[off], &k[off], &v[off], &o[off], seq, head_dim, head_dim);
    }

    // After attention: all-to-all + output projection, back to [bs, seq/W, hidden].
    fluxcpp::A2aTransposeGemmOptions out_opts;
    out_opts.max_bs = bs;
    out_opts.max_seq = seq;
    out_opts.nheads = nheads;
    out_opts.head_dim = head_dim;
    out_opts.n = hidden;
    fluxcpp::A2aTransposeGemm out_proj(ctx, out_opts);  // collective
    std::vector<float> y(bs * sl * hidden);
    out_proj.forward(o.data(), bs, seq, wo.data(), nullptr, y.data());  // collective

    // Reference: the same block on the whole sequence and all heads, without communication.
    const std::vector<float> qf = linear(x.data(), wq, bs * seq, c, hidden),
                             kf = linear(x.data(), wk, bs * seq, c, hidden),
                             vf = linear(x.data(), wv, bs * seq, c, hidden);
    std::vector<float> of(bs * seq * c);
    for (int64_t b = 0; b < bs; ++b)
      for (int64_t h = 0; h < nheads; ++h) {
        const int64_t off = b * seq * c + h * head_dim;
        attend(&qf[off], &kf[off], &vf[off], &of[off], seq, head_dim, c);
      }
    const std::vector<float> yf = linear(of.data(), wo, bs * seq, hidden, c);

    // Compare this rank's slice; agree on the worst error over all ranks.
    double err[2] = {0.0, 0.0};  // max abs error, max abs reference value
    for (int64_t b = 0; b < bs; ++b)
      for (int64_t i = 0; i < sl * hidden; ++i) {
        const double ref = yf[(b * seq + r * sl) * hidden + i];
        err[0] = std::max(err[0], std::fabs(y[b * sl * hidden + i] - ref));
        err[1] = std::max(err[1], std::fabs(ref));
      }
    MPI_Allreduce(MPI_IN_PLACE, err, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const bool ok = err[0] <= 1e-4 * err[1];
    if (!ok) rc = 1;
    if (r == 0)
      std::printf("ulysses example on %d ranks: %s (max abs err %.3g, max |y| %.3g)\n", W,
                  ok ? "ok" : "WRONG", err[0], err[1]);
    ctx.close();
  } catch (const fluxcpp::Error& e) {
    std::fprintf(stderr, "fluxcpp error (%s): %s\n", fluxcpp::errc_name(e.code()), e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
