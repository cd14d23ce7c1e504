// An expert-parallel MoE FFN block with fluxcpp::MoeDispatch, fluxcpp::GroupedGemm and
// fluxcpp::MoeCombine, checked against the same block computed on one rank.
//
// Each rank holds its own tokens x [T_r, hidden] (T_r differs per rank) and the experts
// [r·L, (r+1)·L) of E = L·W. A router picks each token's top-k experts and their weights; dispatch
// sends every routed slot's row to its expert's rank, expert-major; two grouped GEMMs with an
// activation between them run each local expert on its rows; combine sends the rows back and sums
// each token's k outputs, weighted, in k order.
//   mpirun -np 2 build/python-free-examples/fluxcpp_example_moe_ffn
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

float silu(float v) {
  return v / (1.0f + std::exp(-v));
}

// Router: logits = x · wrᵀ; the top-k experts (ties to the lower id) and their softmax weights,
// renormalised over the k picked.
void route(const float* x, const std::vector<float>& wr, int64_t T, int64_t hidden, int64_t E,
           int64_t K, int32_t* ids, float* weights) {
  std::vector<double> logit(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      double acc = 0.0;
      for (int64_t h = 0; h < hidden; ++h) acc += double(x[t * hidden + h]) * wr[e * hidden + h];
      logit[e] = acc;
    }
    std::vector<int32_t> order(E);
    for (int64_t e = 0; e < E; ++e) order[e] = static_cast<int32_t>(e);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logit[a] > logit[b]; });
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) sum += std::exp(logit[order[k]] - logit[order[0]]);
    for (int64_t k = 0; k < K; ++k) {
      ids[t * K + k] = order[k];
      weights[t * K + k] = static_cast<float>(std::exp(logit[order[k]] - logit[order[0]]) / sum);
    }
  }
}

// One expert on one token: w2 · silu(w1 · x), w1 [ffn, hidden], w2 [hidden, ffn].
void expert(const float* x, const float* w1, const float* w2, int64_t hidden, int64_t ffn,
            double* out) {
  std::vector<float> a(ffn);
  for (int64_t f = 0; f < ffn; ++f) {
    double acc = 0.0;
    for (int64_t h = 0; h < hidden; ++h) acc += double(x[h]) * w1[f * hidden + h];
    a[f] = silu(static_cast<float>(acc));
  }
  for (int64_t h = 0; h < hidden; ++h) {
    double acc = 0.0;
    for (int64_t f = 0; f < ffn; ++f) acc += double(a[f]) * w2[h * ffn + f];
    out[h] = acc;
  }
}

}  // namespace

// --help prints this; it is handled before MPI starts, so it also works without mpirun.
const char kUsage[] =
    "usage: mpirun -np N fluxcpp_example_moe_ffn [--help]\n"
    "An expert-parallel MoE FFN block (router top-k -> MoeDispatch -> GroupedGemm -> SiLU ->\n"
    "GroupedGemm -> MoeCombine) checked against the same block computed on one rank; rank 0\n"
    "prints ok or WRONG with the largest error. Any number of ranks (2 experts per rank).\n"
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
    const int64_t L = 2, E = L * W, K = 2, hidden = 32, ffn = 48;
    const int64_t max_tokens = 16 + 3 * (W - 1), T = 16 + 3 * r;

    // Weights, the same on every rank (each rank uses its experts' slices); this rank's tokens.
    const float s1 = 1.0f / std::sqrt(float(hidden)), s2 = 1.0f / std::sqrt(float(ffn));
    const std::vector<float> wr = random_tensor(E * hidden, 1, s1),
                             w1 = random_tensor(E * ffn * hidden, 2, s1),
                             w2 = random_tensor(E * hidden * ffn, 3, s2);
    const std::vector<float> x = random_tensor(T * hidden, 100 + r, 1.0f);

    // Router (local).
    std::vector<int32_t> ids(T * K);
    std::vector<float> weights(T * K);
    route(x.data(), wr, T, hidden, E, K, ids.data(), weights.data());

    // Dispatch: this rank receives the rows of its experts, expert-major.
    fluxcpp::MoeDispatch dispatch(ctx, {max_tokens, hidden, K, E, 0, fluxcpp::DType::kFloat32});
    const int64_t cap = dispatch.options().max_recv_rows;
    std::vector<float> recv(cap * hidden);
    std::vector<int64_t> counts(L);
    const int64_t R = dispatch.forward({x.data(), T, ids.data(), nullptr},
                                       {recv.data(), nullptr, nullptr, counts.data()});

    // The local experts: grouped GEMM, activation, grouped GEMM (counts are the group sizes).
    fluxcpp::GroupedGemmOptions up{L, cap, ffn, hidden};
    fluxcpp::GroupedGemmOptions down{L, cap, hidden, ffn};
    fluxcpp::GroupedGemm gemm_up(ctx, up), gemm_down(ctx, down);
    std::vector<float> act(cap * ffn), y(cap * hidden);
    gemm_up.forward(recv.data(), counts.data(), &w1[r * L * ffn * hidden], nullptr, act.data());
    for (int64_t i = 0; i < R * ffn; ++i) act[i] = silu(act[i]);
    gemm_down.forward(act.data(), counts.data(), &w2[r * L * hidden * ffn], nullptr, y.data());

    // Combine: each token's k expert outputs come back and are summed with its weights.
    fluxcpp::MoeCombine combine(ctx, {max_tokens, hidden, K, E, 0});
    std::vector<float> out(T * hidden);
    combine.forward({y.data(), R, T, ids.data(), weights.data()}, out.data());

    // Reference: the same block on this rank's tokens with every expert at hand, no communication.
    double err[2] = {0.0, 0.0};  // max abs error, max abs reference value
    std::vector<double> ye(hidden);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> ref(hidden, 0.0);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t e = ids[t * K + k];
        expert(&x[t * hidden], &w1[e * ffn * hidden], &w2[e * hidden * ffn], hidden, ffn,
               ye.data());
        for (int64_t h = 0; h < hidden; ++h) ref[h] += weights[t * K + k] * ye[h];
      }
      for (int64_t h = 0; h < hidden; ++h) {
        err[0] = std::max(err[0], std::fabs(out[t * hidden + h] - ref[h]));
        err[1] = std::max(err[1], std::fabs(ref[h]));
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, err, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const bool ok = err[0] <= 1e-4 * err[1];
    if (!ok) rc = 1;
    if (r == 0)
      std::printf(
          "moe ffn example on %d ranks (%lld experts, top-%lld): %s (max abs err %.3g, "
          "max |y| %.3g)\n",
          W, static_cast<long long>(E), static_cast<long long>(K), ok ? "ok" : "WRONG", err[0],
          err[1]);
    ctx.close();
  } catch (const fluxcpp::Error& e) {
    std::fprintf(stderr, "fluxcpp error (%s): %s\n", fluxcpp::errc_name(e.code()), e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
