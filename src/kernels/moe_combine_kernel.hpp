// The fixed-order weighted sum of MoE combine: for each token, its routed rows added in k order.
// Memory only: the caller resolves where each slot's row is.
#pragma once

#include <cstdint>

#include "fluxcpp/types.hpp"

namespace fluxcpp::kernels {

// For t in [t0, t1): acc = +0 (f32; f64 for f64 rows); for k = 0..K-1 with rows[t·K + k] non-null:
// acc <- acc + weights[t·K + k] · row (the product rounded to the accumulator type, then added:
// this file is compiled without floating-point contraction, so no fused multiply-add; with
// weights null the multiply is skipped); output[t] = acc rounded once (round to nearest even for
// bf16). rows hold `hidden` elements of in_dtype; output is [*, hidden] of out_dtype. Pairs:
// f32/f32, f64/f64, bf16/bf16, bf16/f32. Bitwise reproducible: one order, one thread per token.
void moe_combine_rows(const void* const* rows, const float* weights, int64_t t0, int64_t t1,
                      int64_t topk, int64_t hidden, DType in_dtype, DType out_dtype, void* output);

// part[i] <- part[i] + w·y[i] for i < n, in `acc` (f32 or f64): the product rounded to acc, then
// added (no fused multiply-add, as above); w null: part[i] + y[i]. One routed slot's term of
// GroupedGemmGatherRs's per-token sum.
void add_weighted_row(DType acc, void* part, const void* y, int64_t n, const float* w);

}  // namespace fluxcpp::kernels
