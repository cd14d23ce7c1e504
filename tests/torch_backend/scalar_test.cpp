// The backend engine's element-wise reductions (backend/engine/scalar.hpp) against references
// computed here: rank-order accumulation, bf16/f16 rounded once from f32, wrapping integers,
// bool as logic, NaN propagation in MIN/MAX, AVG divided before rounding.
#include "scalar.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace fb = fluxcpp::backend;

namespace {

uint16_t bf16(float f) {  // round to nearest even, the reference
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T>
std::vector<T> run(fb::Scalar s, fb::Reduce r, const std::vector<std::vector<T>>& blocks,
                   int divisor = 1) {
  std::vector<const void*> ptrs;
  for (const auto& b : blocks) ptrs.push_back(b.data());
  std::vector<T> out(blocks[0].size());
  fb::reduce_blocks(s, r, ptrs.data(), static_cast<int>(ptrs.size()),
                    static_cast<int64_t>(out.size()), out.data(), divisor);
  return out;
}

}  // namespace

TEST(BackendScalar, Bf16SumAccumulatesInF32AndRoundsOnce) {
  // 1 + 2^-8 + 2^-8: rounding after each add (a tie, to even: 1) would lose both; once, the sum
  // 1 + 2^-7 is exact in bf16.
  const std::vector<std::vector<uint16_t>> b = {{bf16(1.0f)}, {bf16(0.00390625f)},
                                                {bf16(0.00390625f)}};
  const auto out = run(fb::Scalar::kBF16, fb::Reduce::kSum, b);
  EXPECT_EQ(from_bf16(bf16(1.0f + 0.00390625f)), 1.0f);  // the stepwise path would stay at 1
  EXPECT_EQ(from_bf16(out[0]), 1.0078125f);
}

TEST(BackendScalar, AvgDividesBeforeRounding) {
  const std::vector<std::vector<float>> b = {{1.0f, 3.0f}, {2.0f, 4.0f}, {4.0f, 5.0f}};
  const auto out = run(fb::Scalar::kF32, fb::Reduce::kAvg, b, 3);
  EXPECT_EQ(out[0], (1.0f + 2.0f + 4.0f) / 3.0f);
  EXPECT_EQ(out[1], 4.0f);
}

TEST(BackendScalar, F32SumIsInBlockOrder) {
  const std::vector<std::vector<float>> b = {{1e8f}, {1.0f}, {-1e8f}};
  EXPECT_EQ(run(fb::Scalar::kF32, fb::Reduce::kSum, b)[0], (1e8f + 1.0f) + -1e8f);
}

TEST(BackendScalar, IntegersWrapAndBitwise) {
  const std::vector<std::vector<int8_t>> b = {{127, 0x0f, 6}, {1, 0x3c, 7}};
  EXPECT_EQ(run(fb::Scalar::kI8, fb::Reduce::kSum, b)[0], static_cast<int8_t>(-128));
  EXPECT_EQ(run(fb::Scalar::kI8, fb::Reduce::kBand, b)[1], 0x0c);
  EXPECT_EQ(run(fb::Scalar::kI8, fb::Reduce::kBxor, b)[1], 0x33);
  EXPECT_EQ(run(fb::Scalar::kI8, fb::Reduce::kProduct, b)[2], 42);
  const std::vector<std::vector<int64_t>> big = {{INT64_MAX}, {2}};
  EXPECT_EQ(run(fb::Scalar::kI64, fb::Reduce::kSum, big)[0], INT64_MIN + 1);
}

TEST(BackendScalar, BoolIsLogic) {
  const std::vector<std::vector<uint8_t>> b = {{1, 0, 1}, {0, 0, 1}};
  EXPECT_EQ(run(fb::Scalar::kBool, fb::Reduce::kSum, b), (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(run(fb::Scalar::kBool, fb::Reduce::kMin, b), (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ(run(fb::Scalar::kBool, fb::Reduce::kBxor, b), (std::vector<uint8_t>{1, 0, 0}));
}

TEST(BackendScalar, MinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> b = {{1.0f, nan}, {nan, 2.0f}};
  for (auto r : {fb::Reduce::kMin, fb::Reduce::kMax}) {
    const auto out = run(fb::Scalar::kF32, r, b);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_TRUE(std::isnan(out[1]));
  }
}

TEST(BackendScalar, F16RoundsOnceFromF32) {
  const std::vector<std::vector<_Float16>> b = {{static_cast<_Float16>(2048.0f)},
                                                {static_cast<_Float16>(1.0f)},
                                                {static_cast<_Float16>(1.0f)}};
  // 2048 + 1 + 1 in f32 is 2050, exact in f16; rounding 2049 first (to even: 2048) would lose it.
  EXPECT_EQ(static_cast<float>(run(fb::Scalar::kF16, fb::Reduce::kSum, b)[0]), 2050.0f);
}

TEST(BackendScalar, WhatIsDefined) {
  EXPECT_FALSE(fb::reduce_supported(fb::Scalar::kF32, fb::Reduce::kBand));
  EXPECT_FALSE(fb::reduce_supported(fb::Scalar::kI32, fb::Reduce::kAvg));
  EXPECT_TRUE(fb::reduce_supported(fb::Scalar::kBool, fb::Reduce::kBxor));
  EXPECT_EQ(fb::scalar_size(fb::Scalar::kBF16), 2u);
}
