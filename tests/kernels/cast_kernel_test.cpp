// Unit tests of the bf16 casts (kernels/cast.hpp): the scalar and array conversions, every bf16
// value, rounding to nearest even with its edge cases, NaNs, and misaligned or odd-length arrays.
// Single process, no MPI. (inplace_cast_kernel_test.cpp covers the in-place cast kernel.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_test_data.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::kernels {
namespace {

using test::bits_of;
using test::float_of;
using test::hex;
using test::Rng;

TEST(Cast, ExhaustiveBf16RoundTrip) {
  std::vector<uint16_t> all(65536), back(65536);
  std::vector<float> wide(65536);
  for (uint32_t v = 0; v < 65536; ++v) all[v] = static_cast<uint16_t>(v);
  bf16_to_f32(all.data(), wide.data(), 65536);
  f32_to_bf16(wide.data(), back.data(), 65536);
  for (uint32_t v = 0; v < 65536; ++v) {
    const float f = bf16_to_f32(static_cast<uint16_t>(v));
    ASSERT_EQ(bits_of(wide[v]), bits_of(f)) << "bf16_to_f32 array at index " << v << ": expected "
                                            << hex(bits_of(f)) << " got " << hex(bits_of(wide[v]));
    ASSERT_EQ(bits_of(f), v << 16) << "index " << v;
    const uint16_t scalar = f32_to_bf16(f);
    ASSERT_EQ(back[v], scalar) << "f32_to_bf16 array at index " << v << ": expected " << hex(scalar)
                               << " got " << hex(back[v]);
    if (std::isnan(f)) {
      // NaNs stay NaN, quietened, sign and payload otherwise kept.
      ASSERT_TRUE(std::isnan(bf16_to_f32(scalar))) << "index " << v;
      ASSERT_EQ(scalar, v | 0x0040u) << "index " << v;
    } else {
      ASSERT_EQ(scalar, v) << "round trip at index " << v << ": expected " << hex(v) << " got "
                           << hex(scalar);
    }
  }
}

TEST(Cast, RoundToNearestEven) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f808000u, 0x3f80},  // tie, even neighbour below
      {0x3f818000u, 0x3f82},  // tie, odd -> up to even
      {0x3f808001u, 0x3f81},  // just above the tie
      {0x3f807fffu, 0x3f80},  // just below the tie
      {0xbf818000u, 0xbf82},  // negative tie
      {0x7f7fffffu, 0x7f80},  // max float rounds to +inf
      {0xff7fffffu, 0xff80},  // and to -inf
      {0x7f800000u, 0x7f80},  // +inf
      {0xff800000u, 0xff80},  // -inf
      {0x80000000u, 0x8000},  // -0
      {0x00008000u, 0x0000},  // denormal tie to even (zero)
      {0x00018000u, 0x0002},  // denormal tie to even (up)
      {0x007fffffu, 0x0080},  // largest denormal rounds up to the smallest normal
      {0x7f800001u, 0x7fc0},  // signalling NaN with a low payload only: stays NaN
      {0xffc00001u, 0xffc0},  // negative quiet NaN
      {0x7fffffffu, 0x7fff},  // NaN that would carry into the exponent if rounded
  };
  for (const Case& c : cases) {
    const float f = float_of(c.in);
    EXPECT_EQ(f32_to_bf16(f), c.out)
        << "input " << hex(c.in) << ": expected " << hex(c.out) << " got " << hex(f32_to_bf16(f));
    uint16_t arr = 0;
    f32_to_bf16(&f, &arr, 1);
    EXPECT_EQ(arr, c.out) << "array version, input " << hex(c.in) << ": expected " << hex(c.out)
                          << " got " << hex(arr);
  }
}

TEST(Cast, ArrayMatchesScalarOnRandomBits) {
  Rng rng(5);
  const int64_t count = 200003;  // odd: exercises the scalar tail
  std::vector<float> src(count);
  // Raw bit patterns cover NaNs, infinities and denormals; mix in some of each on purpose.
  for (int64_t i = 0; i < count; ++i) {
    uint32_t u = rng.u32();
    switch (i % 7) {
      case 0: u &= 0x807fffffu; break;                 // denormal or zero
      case 1: u |= 0x7f800000u; break;                 // inf or NaN
      case 2: u = (u & 0xffff0000u) | 0x8000u; break;  // exact tie
      default: break;
    }
    src[i] = float_of(u);
  }
  std::vector<uint16_t> dst(count + 1, 0xabcd);
  // Misaligned start and odd length on top of the full run.
  f32_to_bf16(src.data(), dst.data(), count);
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t expected = f32_to_bf16(src[i]);
    ASSERT_EQ(dst[i], expected) << "index " << i << " input " << hex(bits_of(src[i]))
                                << ": expected " << hex(expected) << " got " << hex(dst[i]);
  }
  ASSERT_EQ(dst[count], 0xabcd) << "wrote past the end";
  f32_to_bf16(src.data() + 1, dst.data() + 1, 37);
  for (int64_t i = 1; i < 38; ++i) ASSERT_EQ(dst[i], f32_to_bf16(src[i])) << "index " << i;

  std::vector<uint16_t> h(count);
  for (int64_t i = 0; i < count; ++i) h[i] = static_cast<uint16_t>(rng.u32());
  std::vector<float> wide(count + 1, 1.5f);
  bf16_to_f32(h.data() + 3, wide.data(), count - 3);
  for (int64_t i = 0; i < count - 3; ++i) {
    const float expected = bf16_to_f32(h[i + 3]);
    ASSERT_EQ(bits_of(wide[i]), bits_of(expected))
        << "index " << i << ": expected " << hex(bits_of(expected)) << " got "
        << hex(bits_of(wide[i]));
  }
  ASSERT_EQ(wide[count - 3], 1.5f) << "wrote past the end";
}

}  // namespace
}  // namespace fluxcpp::kernels
