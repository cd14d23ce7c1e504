// Vectorised fixed-order sum of W buffers.
#pragma once

#include <cstdint>

#include "fluxcpp/types.hpp"

namespace fluxcpp::kernels {

// dst[i] = ((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ... (+ addend[i]), always in this order,
// so the result is bitwise reproducible whatever the timing or thread count.
// src_dtype: f32, f64 or bf16. Accumulation: f64 for f64, f32 otherwise. dst_dtype: f64 with
// f64 sources; f32 or bf16 otherwise (rounded once). addend (may be null) is in dst_dtype and
// added last. nsrcs >= 1. dst may alias srcs[0] (in-place accumulate).
void reduce_sum(DType src_dtype, const void* const* srcs, int nsrcs, DType dst_dtype, void* dst,
                int64_t count, const void* addend = nullptr);

// The code a sum of f32/bf16 runs on. kAuto picks AVX-512 (AVX512F) when the CPU has it, else
// AVX2, else kPortable (plain C++ loops, which the compiler vectorises for the x86-64 baseline);
// f64 always runs kPortable.
// Every choice gives the same bits: the same additions in the same order per element, the same
// round-to-nearest-even narrowing to bf16 (a NaN keeps its sign and gets the quiet bit). The
// others exist so that tests can check every path on one machine.
enum class ReduceIsa { kAuto, kPortable, kAvx2, kAvx512 };
bool reduce_isa_available(ReduceIsa isa);
// dst[i][j] += bias[j] for rows x n elements of `acc` (f32 or f64) at dst; bias in acc, or bf16
// with acc f32 (widened exactly). The partial sums' one bias term, added before a fixed-order sum.
void add_bias(DType acc, void* dst, int64_t rows, int64_t n, const void* bias, DType bias_dtype);
// reduce_sum on the given code (unavailable: kPortable).
void reduce_sum(ReduceIsa isa, DType src_dtype, const void* const* srcs, int nsrcs, DType dst_dtype,
                void* dst, int64_t count, const void* addend = nullptr);

}  // namespace fluxcpp::kernels
