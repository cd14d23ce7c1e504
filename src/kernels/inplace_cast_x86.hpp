// The vector bodies of kernels::inplace_cast_range on x86 (SSE2 baseline, AVX2 by runtime
// dispatch). Private to src/kernels.
#pragma once

#include <cstdint>

namespace fluxcpp::kernels::x86 {

// A body converts whole vectors of a range [b, e) of the buffer p and returns where it stopped:
// narrowing bodies walk forward and convert [b, returned); widening bodies walk backward and
// convert [returned, e). The caller converts the rest with scalar code, continuing the same walk.
// Every vector is loaded completely before any of its outputs is stored.
using Body = int64_t (*)(unsigned char* p, int64_t b, int64_t e);

struct Bodies {
  Body f32_to_bf16, f64_to_f32, bf16_to_f32, f32_to_f64;
};

// Null when the build or the CPU lacks the instruction set.
const Bodies* sse2_bodies();
const Bodies* avx2_bodies();

}  // namespace fluxcpp::kernels::x86
