// An MoE block under tensor parallelism: layer 0 (AgScatterGroupedGemm: all-gather the tokens,
// scatter them to their experts, one GEMM per expert with this rank's ffn shard), a ReLU, and
// layer 1 (GroupedGemmGatherRs: one GEMM per expert, the routing-weighted topk sum back to token
// order, reduce-scatter). Every rank holds T/W tokens and a 1/W column shard of every expert's
// weights (ep_size 1: pure TP). The result is checked against the same block computed on one
// rank (the same two ops on MPI_COMM_SELF with the whole weights).
//   mpirun -np 2 build/python-free-examples/fluxcpp_example_moe_tp
#include <fluxcpp/fluxcpp.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kTokensPerRank = 16, kHidden = 64, kFfn = 128, kTopk = 2, kExperts = 8;

// Deterministic values in [-1, 1): every rank builds the same model and routing.
float value(uint64_t i, uint64_t salt) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + salt * 0xBF58476D1CE4E5B9ull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<float>(static_cast<double>(z >> 40) / 8388608.0 - 1.0);
}

// The block: layer 0 -> ReLU -> layer 1 on a context; `tokens` are this rank's, `w0` [E, F, H]
// and `w1` [E, H, F] its shards (F = kFfn / W). Returns this rank's output [T/W, H].
std::vector<float> moe_block(const fluxcpp::Context& ctx, int64_t T,
                             const std::vector<float>& tokens, const fluxcpp::MoeLayout& layout,
                             const std::vector<float>& weights, const std::vector<float>& w0,
                             const std::vector<float>& w1) {
  const int W = ctx.world_size();
  fluxcpp::MoeTpOptions o;
  o.max_tokens = T;
  o.hidden = kHidden;
  o.ffn_shard = kFfn / W;
  o.topk = kTopk;
  o.num_experts = kExperts;
  o.ep_size = 1;
  fluxcpp::AgScatterGroupedGemm layer0(ctx, o);  // collective
  fluxcpp::GroupedGemmGatherRs layer1(ctx, o);
  int64_t rows = 0;
  for (int64_t c : layout.expert_counts) rows += c;
  std::vector<float> h(static_cast<std::size_t>(rows * o.ffn_shard)), out(T / W * kHidden);
  layer0.forward(tokens.data(), T, layout.expert_counts.data(), layout.scatter_index.data(),
                 w0.data(), nullptr, h.data());
  for (float& v : h) v = std::max(v, 0.0f);  // the activation, elementwise on the shard
  layer1.forward(h.data(), T, layout.expert_counts.data(), layout.scatter_index.data(), w1.data(),
                 weights.data(), out.data());
  return out;
}

}  // namespace

// --help prints this; it is handled before MPI starts, so it also works without mpirun.
const char kUsage[] =
    "usage: mpirun -np N fluxcpp_example_moe_tp [--help]\n"
    "An MoE block under tensor parallelism (AgScatterGroupedGemm -> ReLU -> GroupedGemmGatherRs)\n"
    "checked against the same block computed on one rank; rank 0 prints ok or WRONG with the\n"
    "largest error. W ranks with W dividing 128 (the FFN width), e.g. 1, 2, 4.\n"
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
    const int64_t T = kTokensPerRank * W, F = kFfn / W;
    // The model and the routing, the same on every rank.
    std::vector<float> x(T * kHidden), w0(kExperts * kFfn * kHidden), w1(kExperts * kHidden * kFfn);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = value(i, 1);
    for (std::size_t i = 0; i < w0.size(); ++i) w0[i] = value(i, 2) / 8;
    for (std::size_t i = 0; i < w1.size(); ++i) w1[i] = value(i, 3) / 8;
    std::vector<int32_t> ids(T * kTopk);
    std::vector<float> weights(T * kTopk);
    for (int64_t i = 0; i < T * kTopk; ++i) {
      ids[i] = static_cast<int32_t>((value(i, 4) + 1.0f) * 0.5f * kExperts) % kExperts;
      weights[i] = (value(i, 5) + 1.0f) * 0.5f;
    }
    const fluxcpp::MoeLayout layout = fluxcpp::moe_layout(ids.data(), T, kTopk, kExperts, 1);

    // This rank's tokens and weight shards: rows [r·F, (r+1)·F) of each expert's [ffn, hidden]
    // layer-0 weight, the same columns of each expert's [hidden, ffn] layer-1 weight.
    std::vector<float> mine(x.begin() + r * kTokensPerRank * kHidden,
                            x.begin() + (r + 1) * kTokensPerRank * kHidden);
    std::vector<float> s0(kExperts * F * kHidden), s1(kExperts * kHidden * F);
    for (int64_t e = 0; e < kExperts; ++e)
      for (int64_t f = 0; f < F; ++f)
        for (int64_t h = 0; h < kHidden; ++h) {
          s0[(e * F + f) * kHidden + h] = w0[(e * kFfn + r * F + f) * kHidden + h];
          s1[(e * kHidden + h) * F + f] = w1[(e * kHidden + h) * kFfn + r * F + f];
        }
    const std::vector<float> out = moe_block(ctx, T, mine, layout, weights, s0, s1);

    // The same block on one rank: every token, the whole weights.
    fluxcpp::Context self(MPI_COMM_SELF);
    const std::vector<float> whole = moe_block(self, T, x, layout, weights, w0, w1);
    double worst = 0;
    for (int64_t i = 0; i < kTokensPerRank * kHidden; ++i) {
      const double want = whole[r * kTokensPerRank * kHidden + i];
      worst = std::max(worst, std::fabs(out[i] - want) / (1.0 + std::fabs(want)));
    }
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    rc = worst <= 1e-5 ? 0 : 1;
    if (r == 0)
      std::printf(
          "moe_tp example on %d ranks (T=%lld, hidden %lld, ffn %lld, E=%lld, topk %lld): "
          "largest relative difference to one rank %.2e: %s\n",
          W, static_cast<long long>(T), static_cast<long long>(kHidden),
          static_cast<long long>(kFfn), static_cast<long long>(kExperts),
          static_cast<long long>(kTopk), worst, rc == 0 ? "ok" : "WRONG");
    self.close();
    ctx.close();
  } catch (const fluxcpp::Error& e) {
    std::fprintf(stderr, "fluxcpp error (%s): %s\n", fluxcpp::errc_name(e.code()), e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
