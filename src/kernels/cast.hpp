// bf16 <-> f32 and f16 <-> f32 conversion. bf16 is the upper 16 bits of an IEEE-754 binary32;
// f16 is IEEE-754 binary16 (the compiler's _Float16).
#pragma once

#include <cstdint>
#include <cstring>

namespace fluxcpp::kernels {

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even; NaN stays NaN (quietened), infinities stay infinities.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

void bf16_to_f32(const uint16_t* src, float* dst, int64_t count);
void f32_to_bf16(const float* src, uint16_t* dst, int64_t count);

// f16 (as its 16 bits) -> f32 is exact; f32 -> f16 rounds to nearest even (overflow to Inf, a NaN
// stays a NaN), as the compiler's _Float16 conversion does.
void f16_to_f32(const uint16_t* src, float* dst, int64_t count);
void f32_to_f16(const float* src, uint16_t* dst, int64_t count);

}  // namespace fluxcpp::kernels
