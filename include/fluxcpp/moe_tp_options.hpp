// fluxcpp/moe_tp_options.hpp: the shape of an MoE layer under tensor parallelism, shared by
// AgScatterGroupedGemm (layer 0) and GroupedGemmGatherRs (layer 1).
#pragma once

#include <cstdint>

#include "fluxcpp/types.hpp"

namespace fluxcpp {

// Rank layout (FLUX): tp = W / ep_size; rank r is EP rank q = r / tp and TP rank r % tp; it owns
// the L = num_experts / ep_size experts [q·L, (q+1)·L), a column shard of width ffn_shard of each.
// ep_size = 1 is pure tensor parallelism. W % ep_size == 0 and num_experts % ep_size == 0.
struct MoeTpOptions {
  int64_t max_tokens = 0;                // largest global token count T a forward may pass
  int64_t hidden = 0;                    // model width
  int64_t ffn_shard = 0;                 // this rank's share of the expert width
  int64_t topk = 0;                      // K >= 1
  int64_t num_experts = 0;               // E >= 1
  int64_t ep_size = 1;                   // expert-parallel ranks, dividing W and E
  DType input_dtype = DType::kFloat32;   // input and weight
  DType output_dtype = DType::kFloat32;  // pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
  bool transpose_weight = false;         // each expert's weight transposed (see the ops)
};

}  // namespace fluxcpp
