// Unit tests of the fixed-order reduction (kernels/reduce.hpp) against the documented order
// written as a plain loop: every dtype pair, source count and length, the addend, a single
// rounding of bf16, in place into the first source, and bad arguments. Single process, no MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fluxcpp/error.hpp"
#include "fluxcpp/types.hpp"
#include "kernel_test_data.hpp"
#include "kernels/cast.hpp"
#include "kernels/reduce.hpp"

namespace fluxcpp::kernels {
namespace {

using test::Buffer;
using test::hex;
using test::Rng;

// The documented order, written as plainly as possible.
// dst's own dtype decides the final rounding.
void reference_reduce(DType src_dtype, const std::vector<Buffer>& srcs, Buffer& dst, int64_t count,
                      const Buffer* addend) {
  for (int64_t i = 0; i < count; ++i) {
    if (src_dtype == DType::kFloat64) {
      double acc = srcs[0].get(i);
      for (size_t s = 1; s < srcs.size(); ++s) acc += srcs[s].get(i);
      if (addend != nullptr) acc += addend->get(i);
      dst.set(i, acc);
    } else {
      float acc = static_cast<float>(srcs[0].get(i));
      for (size_t s = 1; s < srcs.size(); ++s) acc += static_cast<float>(srcs[s].get(i));
      if (addend != nullptr) acc += static_cast<float>(addend->get(i));
      dst.set(i, acc);  // f32 -> double -> f32 is exact; bf16 rounds once here
    }
  }
}

::testing::AssertionResult same_bits(const Buffer& expected, const Buffer& got, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (!got.same_bits(expected, i)) {
      std::ostringstream os;
      os.precision(17);
      os << "index " << i << ": expected " << expected.get(i) << " got " << got.get(i);
      return ::testing::AssertionFailure() << os.str();
    }
  }
  return ::testing::AssertionSuccess();
}

struct ReducePair {
  DType src, dst;
};

TEST(Reduce, MatchesFixedOrderLoop) {
  const ReducePair pairs[] = {{DType::kFloat32, DType::kFloat32},
                              {DType::kFloat32, DType::kBFloat16},
                              {DType::kBFloat16, DType::kFloat32},
                              {DType::kBFloat16, DType::kBFloat16},
                              {DType::kFloat64, DType::kFloat64}};
  uint64_t seed = 1000;
  for (const ReducePair& pr : pairs) {
    for (int nsrcs : {1, 2, 3, 5, 8}) {
      for (int64_t count : {0, 1, 15, 1023, 1024, 1025, 5003}) {
        for (bool with_addend : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(pr.src)) + "->" + dtype_name(pr.dst) +
                       " nsrcs=" + std::to_string(nsrcs) + " count=" + std::to_string(count) +
                       (with_addend ? " +addend" : ""));
          Rng rng(++seed);
          std::vector<Buffer> srcs;
          std::vector<const void*> ptrs;
          for (int s = 0; s < nsrcs; ++s) {
            srcs.emplace_back(pr.src, count);
            // Mixed magnitudes make the order of additions matter.
            for (int64_t i = 0; i < count; ++i) {
              srcs.back().set(i, rng.uniform() * std::ldexp(1.0, int(rng.next() % 24) - 12));
            }
          }
          for (const Buffer& b : srcs) ptrs.push_back(b.data());
          Buffer addend(pr.dst, count);
          addend.fill_random(rng);
          Buffer expected(pr.dst, count), got(pr.dst, count), again(pr.dst, count);
          reference_reduce(pr.src, srcs, expected, count, with_addend ? &addend : nullptr);
          const void* add = with_addend ? addend.data() : nullptr;
          reduce_sum(pr.src, ptrs.data(), nsrcs, pr.dst, got.data(), count, add);
          EXPECT_TRUE(same_bits(expected, got, count));
          reduce_sum(pr.src, ptrs.data(), nsrcs, pr.dst, again.data(), count, add);
          EXPECT_TRUE(same_bits(got, again, count)) << "repeated call differs";
        }
      }
    }
  }
}

// 1 + 2^-8 + 2^-16 in bf16: rounding after the second term would hit the tie 1 + 2^-8 and round
// to even (1.0), then stay 1.0; rounding once gives 1 + 2^-7.
TEST(Reduce, Bf16RoundsOnce) {
  const uint16_t a[] = {f32_to_bf16(1.0f)}, b[] = {f32_to_bf16(0x1p-8f)},
                 c[] = {f32_to_bf16(0x1p-16f)};
  const void* srcs[] = {a, b, c};
  uint16_t out = 0;
  reduce_sum(DType::kBFloat16, srcs, 3, DType::kBFloat16, &out, 1);
  EXPECT_EQ(out, 0x3f81) << "expected " << hex(0x3f81) << " got " << hex(out);
  // Same with the last term as the addend.
  reduce_sum(DType::kBFloat16, srcs, 2, DType::kBFloat16, &out, 1, c);
  EXPECT_EQ(out, 0x3f81) << "expected " << hex(0x3f81) << " got " << hex(out);
}

TEST(Reduce, InPlaceIntoFirstSource) {
  const ReducePair pairs[] = {{DType::kFloat32, DType::kFloat32},
                              {DType::kBFloat16, DType::kBFloat16},
                              {DType::kFloat64, DType::kFloat64}};
  for (const ReducePair& pr : pairs) {
    SCOPED_TRACE(dtype_name(pr.src));
    const int64_t count = 3001;
    Rng rng(77);
    std::vector<Buffer> srcs(3, Buffer(pr.src, count));
    for (Buffer& b : srcs) b.fill_random(rng);
    Buffer addend(pr.dst, count);
    addend.fill_random(rng);
    Buffer expected(pr.dst, count);
    reference_reduce(pr.src, srcs, expected, count, &addend);
    const void* ptrs[] = {srcs[0].data(), srcs[1].data(), srcs[2].data()};
    reduce_sum(pr.src, ptrs, 3, pr.dst, srcs[0].data(), count, addend.data());
    EXPECT_TRUE(same_bits(expected, srcs[0], count));
  }
}

TEST(Reduce, RejectsBadArguments) {
  float x[2] = {1, 2};
  double d[2] = {1, 2};
  const void* fsrc[] = {x};
  const void* dsrc[] = {d};
  EXPECT_THROW(reduce_sum(DType::kFloat64, dsrc, 1, DType::kFloat32, x, 2), Error);
  EXPECT_THROW(reduce_sum(DType::kFloat32, fsrc, 1, DType::kFloat64, d, 2), Error);
  EXPECT_THROW(reduce_sum(DType::kBFloat16, fsrc, 1, DType::kFloat64, d, 2), Error);
  EXPECT_THROW(reduce_sum(DType::kFloat32, fsrc, 0, DType::kFloat32, x, 2), Error);
  const void* null_src[] = {nullptr};
  EXPECT_THROW(reduce_sum(DType::kFloat32, null_src, 1, DType::kFloat32, x, 2), Error);
  try {
    reduce_sum(DType::kFloat64, dsrc, 1, DType::kBFloat16, x, 2);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::kInvalidArgument);
  }
}

}  // namespace
}  // namespace fluxcpp::kernels
