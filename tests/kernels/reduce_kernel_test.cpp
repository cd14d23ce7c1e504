// Unit tests of the fixed-order reduction (kernels/reduce.hpp) against the documented order
// written as a plain loop: every dtype pair, source count and length, the addend, a single
// rounding of bf16, in place into the first source, and bad arguments; the AVX2 code against the
// portable loops, bit for bit, on special values. Single process, no MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

// Raw bits of one element (f32 or bf16) in a buffer.
void set_bits(Buffer& b, int64_t i, uint32_t bits) {
  if (b.dtype() == DType::kBFloat16) {
    const auto v = static_cast<uint16_t>(bits >> 16);
    std::memcpy(static_cast<char*>(b.data()) + 2 * i, &v, 2);
  } else {
    std::memcpy(static_cast<char*>(b.data()) + 4 * i, &bits, 4);
  }
}

// f32 bit patterns that exercise the rounding and the special cases: +-0, +-Inf, quiet and
// signalling NaNs of both signs and several payloads, denormals, the largest finite values (their
// sums overflow), and values whose bf16 rounding is a tie (lower half exactly 0x8000) or one ulp
// either side of it, with an even and an odd kept bit.
const uint32_t kSpecial[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
    0xff800001u, 0x7fa00000u, 0x7fc12345u, 0xffbfffffu, 0x00000001u, 0x807fffffu, 0x00400000u,
    0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u,
    0xbf808000u, 0xbf818000u, 0x3f800000u, 0x3b800000u, 0x37800000u, 0x4b000000u, 0xcb7fffffu};

// The vector code (AVX2 or AVX-512) against the portable loops, bit for bit: every f32/bf16 pair,
// 1..5 sources, with and without the addend, odd counts (every vector tail of both unrolled
// widths), random data with special values mixed in, and in place into the first source.
void matches_portable_bit_for_bit(ReduceIsa isa) {
  EXPECT_TRUE(reduce_isa_available(ReduceIsa::kPortable));
  const ReducePair pairs[] = {{DType::kFloat32, DType::kFloat32},
                              {DType::kFloat32, DType::kBFloat16},
                              {DType::kBFloat16, DType::kFloat32},
                              {DType::kBFloat16, DType::kBFloat16}};
  const int64_t n_special = static_cast<int64_t>(sizeof kSpecial / sizeof kSpecial[0]);
  uint64_t seed = 5000;
  for (const ReducePair& pr : pairs)
    for (int nsrcs : {1, 2, 3, 5})
      for (int64_t count : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 65, 1023, 1025, 4099})
        for (bool with_addend : {false, true})
          for (int special_every : {0, 1, 3}) {
            SCOPED_TRACE(std::string(dtype_name(pr.src)) + "->" + dtype_name(pr.dst) +
                         " nsrcs=" + std::to_string(nsrcs) + " count=" + std::to_string(count) +
                         (with_addend ? " +addend" : "") +
                         " special_every=" + std::to_string(special_every));
            Rng rng(++seed);
            auto fill = [&](Buffer& b) {
              for (int64_t i = 0; i < count; ++i) {
                if (special_every != 0 && rng.next() % special_every == 0) {
                  set_bits(b, i, kSpecial[rng.next() % n_special]);
                } else {
                  // Random bits of finite values of mixed magnitudes, ties included in bf16.
                  const float v = static_cast<float>(rng.uniform()) *
                                  std::ldexp(1.0f, static_cast<int>(rng.next() % 40) - 20);
                  uint32_t u;
                  std::memcpy(&u, &v, 4);
                  if (rng.next() % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // a bf16 tie
                  set_bits(b, i, u);
                }
              }
            };
            std::vector<Buffer> srcs(nsrcs, Buffer(pr.src, count));
            for (Buffer& b : srcs) fill(b);
            Buffer addend(pr.dst, count);
            fill(addend);
            std::vector<const void*> ptrs;
            for (const Buffer& b : srcs) ptrs.push_back(b.data());
            const void* add = with_addend ? addend.data() : nullptr;
            Buffer portable(pr.dst, count), vec(pr.dst, count);
            reduce_sum(ReduceIsa::kPortable, pr.src, ptrs.data(), nsrcs, pr.dst, portable.data(),
                       count, add);
            reduce_sum(isa, pr.src, ptrs.data(), nsrcs, pr.dst, vec.data(), count, add);
            EXPECT_TRUE(same_bits(portable, vec, count));
            if (pr.src == pr.dst) {  // in place into the first source
              Buffer first = srcs[0];
              ptrs[0] = first.data();
              reduce_sum(isa, pr.src, ptrs.data(), nsrcs, pr.dst, first.data(), count, add);
              EXPECT_TRUE(same_bits(portable, first, count)) << "in place";
            }
            if (::testing::Test::HasFailure()) return;
          }
}

TEST(Reduce, Avx2MatchesPortableBitForBit) {
  if (!reduce_isa_available(ReduceIsa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  matches_portable_bit_for_bit(ReduceIsa::kAvx2);
}

TEST(Reduce, Avx512MatchesPortableBitForBit) {
  if (!reduce_isa_available(ReduceIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  matches_portable_bit_for_bit(ReduceIsa::kAvx512);
}

// Finite data: the vector code against the documented order written as a loop.
void matches_fixed_order_loop(ReduceIsa isa) {
  const ReducePair pairs[] = {{DType::kFloat32, DType::kBFloat16},
                              {DType::kBFloat16, DType::kFloat32},
                              {DType::kBFloat16, DType::kBFloat16}};
  uint64_t seed = 9000;
  for (const ReducePair& pr : pairs)
    for (int nsrcs : {2, 4})
      for (int64_t count : {13, 4097}) {
        Rng rng(++seed);
        std::vector<Buffer> srcs(nsrcs, Buffer(pr.src, count));
        std::vector<const void*> ptrs;
        for (Buffer& b : srcs) {
          for (int64_t i = 0; i < count; ++i)
            b.set(i, rng.uniform() * std::ldexp(1.0, int(rng.next() % 24) - 12));
          ptrs.push_back(b.data());
        }
        Buffer addend(pr.dst, count), expected(pr.dst, count), got(pr.dst, count);
        addend.fill_random(rng);
        reference_reduce(pr.src, srcs, expected, count, &addend);
        reduce_sum(isa, pr.src, ptrs.data(), nsrcs, pr.dst, got.data(), count, addend.data());
        EXPECT_TRUE(same_bits(expected, got, count))
            << dtype_name(pr.src) << "->" << dtype_name(pr.dst) << " nsrcs=" << nsrcs;
      }
}

TEST(Reduce, Avx2MatchesFixedOrderLoop) {
  if (!reduce_isa_available(ReduceIsa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  matches_fixed_order_loop(ReduceIsa::kAvx2);
}

TEST(Reduce, Avx512MatchesFixedOrderLoop) {
  if (!reduce_isa_available(ReduceIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  matches_fixed_order_loop(ReduceIsa::kAvx512);
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
