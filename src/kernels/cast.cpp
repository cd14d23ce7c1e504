#include "kernels/cast.hpp"

#include <cstdint>
#include <cstring>

namespace fluxcpp::kernels {
namespace {

// Loops run in fixed chunks of kLanes: a constant trip count lets g++ vectorise them at -O2 too
// (its -O2 cost model refuses loops that would need a scalar epilogue); -O3 vectorises either way.
constexpr int64_t kLanes = 16;

// Same arithmetic as the scalar f32_to_bf16, but the NaN test is a select rather than an early
// return, so the loop body has no control flow and vectorises.
inline uint16_t f32_to_bf16_select(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

}  // namespace

void bf16_to_f32(const uint16_t* src, float* dst, int64_t count) {
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) dst[i + j] = bf16_to_f32(src[i + j]);
  }
  for (; i < count; ++i) dst[i] = bf16_to_f32(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, int64_t count) {
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) dst[i + j] = f32_to_bf16_select(src[i + j]);
  }
  for (; i < count; ++i) dst[i] = f32_to_bf16_select(src[i]);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t count) {
  const auto* h = reinterpret_cast<const _Float16*>(src);
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(h[i]);
}

void f32_to_f16(const float* src, uint16_t* dst, int64_t count) {
  auto* h = reinterpret_cast<_Float16*>(dst);
  for (int64_t i = 0; i < count; ++i) h[i] = static_cast<_Float16>(src[i]);
}

}  // namespace fluxcpp::kernels
