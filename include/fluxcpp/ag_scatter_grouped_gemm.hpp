// fluxcpp/ag_scatter_grouped_gemm.hpp: GemmGroupedV3AGScatter — MoE layer 0 under tensor
// parallelism: the tokens all-gathered over the world, their rows gathered by scatter_index into
// expert-major order, one GEMM per local expert with this rank's ffn shard.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/moe_tp_options.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

namespace detail {
class AgScatterGroupedGemmImpl;
}

class FLUXCPP_API AgScatterGroupedGemm {
 public:
  // Collective: validates (every rank must pass the same options) and allocates the symmetric
  // buffers. Errors are raised on every rank.
  AgScatterGroupedGemm(const Context& ctx, const MoeTpOptions& options);
  AgScatterGroupedGemm(AgScatterGroupedGemm&&) noexcept;
  AgScatterGroupedGemm& operator=(AgScatterGroupedGemm&&) noexcept;
  ~AgScatterGroupedGemm();  // noexcept; never communicates

  // Collective, blocking. T = num_tokens (global, the same on every rank), T % W == 0,
  // T <= max_tokens; T == 0 is a no-op. input [T/W, hidden]: this rank's tokens;
  // X = AllGather(input) [T, hidden]. splits [E] and scatter_index [T, K] must be identical on
  // every rank (checked through a hash in the call's handshake): M = Σ splits <= T·K,
  // scatter_index values in [-1, M) covering every j in [0, M) exactly once (any such
  // permutation). weight [L, ffn_shard, hidden] ([L, hidden, ffn_shard] when transposed);
  // scale [L] f32 or null. With P the prefix sums of splits, b = P[q·L], M_r = P[(q+1)·L] - b:
  // output [M_r, ffn_shard], output[j - b][c] = round(s_l · Σ_h X[t][h]·W_l[c][h]) for each slot
  // (t, k) with j = scatter_index[t][k] in [b, b + M_r), l the local expert of row j.
  // gathered_input [T, hidden] or null receives X. Accumulation f32 (f64 for f64).
  void forward(const void* input, int64_t num_tokens, const int64_t* splits,
               const int32_t* scatter_index, const void* weight, const float* scale, void* output,
               void* gathered_input = nullptr);

  // Benchmark paths. gemm-only (local, not collective): the same GEMMs as a forward on the rows
  // that the last call left in the buffers, no handshake or waits. comm-only (collective): the
  // all-gather alone, into gathered_input (may be null).
  void forward_gemm_only(const void* input, int64_t num_tokens, const int64_t* splits,
                         const int32_t* scatter_index, const void* weight, const float* scale,
                         void* output);
  void forward_comm_only(const void* input, int64_t num_tokens, const int64_t* splits,
                         const int32_t* scatter_index, void* gathered_input);

  const MoeTpOptions& options() const;

 private:
  std::unique_ptr<detail::AgScatterGroupedGemmImpl> impl_;
};

}  // namespace fluxcpp
