// fluxcpp_reduce_blocks and fluxcpp_convert (the C ABI's element-wise helpers) against a
// reference written here element by element: every dtype and every reduction defined on it,
// 1..5 blocks, counts across the kernels' chunk and vector boundaries, in place and not, on
// random bits with NaNs (several payloads), infinities, zeros of both signs and denormals.
// Equality is bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#define FLUXCPP_NO_MPI  // the helpers need no MPI
#include "fluxcpp/fluxcpp.h"

namespace {

// ---- the reference: one element at a time, accumulator widened, blocks in order ------------
float ref_bf16_to_f32(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t ref_f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

template <class T>
struct Plain {
  using Acc = T;
  static Acc load(const void* p, int64_t i) { return static_cast<const T*>(p)[i]; }
  static void store(void* p, int64_t i, Acc v) { static_cast<T*>(p)[i] = v; }
};
struct BF16 {
  using Acc = float;
  static Acc load(const void* p, int64_t i) {
    return ref_bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  static void store(void* p, int64_t i, Acc v) {
    static_cast<uint16_t*>(p)[i] = ref_f32_to_bf16(v);
  }
};
struct F16 {
  using Acc = float;
  static Acc load(const void* p, int64_t i) {
    return static_cast<float>(static_cast<const _Float16*>(p)[i]);
  }
  static void store(void* p, int64_t i, Acc v) {
    static_cast<_Float16*>(p)[i] = static_cast<_Float16>(v);
  }
};
struct Bool {
  using Acc = bool;
  static Acc load(const void* p, int64_t i) { return static_cast<const uint8_t*>(p)[i] != 0; }
  static void store(void* p, int64_t i, Acc v) { static_cast<uint8_t*>(p)[i] = v ? 1 : 0; }
};

template <class A>
A combine(fluxcpp_reduce_op_t r, A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    switch (r) {
      case FLUXCPP_REDUCE_SUM:
      case FLUXCPP_REDUCE_MAX:
      case FLUXCPP_REDUCE_BOR: return a || b;
      case FLUXCPP_REDUCE_BXOR: return a != b;
      default: return a && b;
    }
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    using W = std::common_type_t<U, unsigned>;
    switch (r) {
      case FLUXCPP_REDUCE_SUM: return static_cast<A>(static_cast<W>(a) + static_cast<W>(b));
      case FLUXCPP_REDUCE_PRODUCT: return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
      case FLUXCPP_REDUCE_MIN: return std::min(a, b);
      case FLUXCPP_REDUCE_MAX: return std::max(a, b);
      case FLUXCPP_REDUCE_BAND: return static_cast<A>(a & b);
      case FLUXCPP_REDUCE_BOR: return static_cast<A>(a | b);
      case FLUXCPP_REDUCE_BXOR: return static_cast<A>(a ^ b);
      default: return a;
    }
  } else {
    switch (r) {
      case FLUXCPP_REDUCE_SUM:
      case FLUXCPP_REDUCE_AVG: return a + b;
      case FLUXCPP_REDUCE_PRODUCT: return a * b;
      case FLUXCPP_REDUCE_MIN: return (a != a || a < b) ? a : b;
      case FLUXCPP_REDUCE_MAX: return (a != a || a > b) ? a : b;
      default: return a;
    }
  }
}

template <class S>
void reference(fluxcpp_reduce_op_t r, const std::vector<const void*>& blocks, int64_t count,
               int divisor, void* out) {
  using A = typename S::Acc;
  for (int64_t i = 0; i < count; ++i) {
    A acc = S::load(blocks[0], i);
    for (std::size_t b = 1; b < blocks.size(); ++b) acc = combine<A>(r, acc, S::load(blocks[b], i));
    if constexpr (std::is_floating_point_v<A>)
      if (r == FLUXCPP_REDUCE_AVG) acc = acc / static_cast<A>(divisor);
    S::store(out, i, acc);
  }
}

void reference(fluxcpp_dtype_t d, fluxcpp_reduce_op_t r, const std::vector<const void*>& blocks,
               int64_t count, int divisor, void* out) {
  switch (d) {
    case FLUXCPP_FLOAT32: return reference<Plain<float>>(r, blocks, count, divisor, out);
    case FLUXCPP_FLOAT64: return reference<Plain<double>>(r, blocks, count, divisor, out);
    case FLUXCPP_BFLOAT16: return reference<BF16>(r, blocks, count, divisor, out);
    case FLUXCPP_FLOAT16: return reference<F16>(r, blocks, count, divisor, out);
    case FLUXCPP_INT8: return reference<Plain<int8_t>>(r, blocks, count, divisor, out);
    case FLUXCPP_UINT8: return reference<Plain<uint8_t>>(r, blocks, count, divisor, out);
    case FLUXCPP_INT16: return reference<Plain<int16_t>>(r, blocks, count, divisor, out);
    case FLUXCPP_INT32: return reference<Plain<int32_t>>(r, blocks, count, divisor, out);
    case FLUXCPP_INT64: return reference<Plain<int64_t>>(r, blocks, count, divisor, out);
    case FLUXCPP_BOOL: return reference<Bool>(r, blocks, count, divisor, out);
  }
}

// ---- data ----------------------------------------------------------------------------------
struct Type {
  fluxcpp_dtype_t d;
  const char* name;
  std::size_t size;
  bool floating;
};
const Type kTypes[] = {{FLUXCPP_FLOAT32, "f32", 4, true},   {FLUXCPP_FLOAT64, "f64", 8, true},
                       {FLUXCPP_BFLOAT16, "bf16", 2, true}, {FLUXCPP_FLOAT16, "f16", 2, true},
                       {FLUXCPP_INT8, "i8", 1, false},      {FLUXCPP_UINT8, "u8", 1, false},
                       {FLUXCPP_INT16, "i16", 2, false},    {FLUXCPP_INT32, "i32", 4, false},
                       {FLUXCPP_INT64, "i64", 8, false},    {FLUXCPP_BOOL, "bool", 1, false}};
const fluxcpp_reduce_op_t kOps[] = {FLUXCPP_REDUCE_SUM, FLUXCPP_REDUCE_AVG, FLUXCPP_REDUCE_PRODUCT,
                                    FLUXCPP_REDUCE_MIN, FLUXCPP_REDUCE_MAX, FLUXCPP_REDUCE_BAND,
                                    FLUXCPP_REDUCE_BOR, FLUXCPP_REDUCE_BXOR};
const char* const kOpNames[] = {"sum", "avg", "product", "min", "max", "band", "bor", "bxor"};

bool defined(const Type& t, fluxcpp_reduce_op_t op) {
  if (op == FLUXCPP_REDUCE_BAND || op == FLUXCPP_REDUCE_BOR || op == FLUXCPP_REDUCE_BXOR)
    return !t.floating;
  if (op == FLUXCPP_REDUCE_AVG) return t.floating;
  return true;
}

// Floating values: mostly ordinary numbers of a few magnitudes (so sums round), some special
// bit patterns. Integers and bools: random bytes (bool: any byte, nonzero is true).
template <class F, class Bits>
F pick_float(std::mt19937_64& g, F scale) {
  const int kind = static_cast<int>(g() % 16);
  if (kind == 0) {  // random bits: NaNs of every payload, infinities, denormals
    Bits b = static_cast<Bits>(g());
    F f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  }
  if (kind == 1) return (g() & 1) ? F(0) : -F(0);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  return static_cast<F>(u(g) * static_cast<double>(scale));
}

void fill(const Type& t, std::mt19937_64& g, std::vector<unsigned char>& v) {
  const std::size_t n = v.size() / t.size;
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char* p = v.data() + i * t.size;
    const float scale = (g() % 3 == 0) ? 1e4f : (g() % 2 ? 1.0f : 1e-3f);
    if (t.d == FLUXCPP_FLOAT32) {
      const float f = pick_float<float, uint32_t>(g, scale);
      std::memcpy(p, &f, 4);
    } else if (t.d == FLUXCPP_FLOAT64) {
      const double f = pick_float<double, uint64_t>(g, scale);
      std::memcpy(p, &f, 8);
    } else if (t.d == FLUXCPP_BFLOAT16) {
      uint16_t b = ref_f32_to_bf16(pick_float<float, uint32_t>(g, scale));
      if (g() % 16 == 0) b = static_cast<uint16_t>(g());  // any bits, signalling NaNs too
      std::memcpy(p, &b, 2);
    } else if (t.d == FLUXCPP_FLOAT16) {
      _Float16 h = static_cast<_Float16>(pick_float<float, uint32_t>(g, std::min(scale, 100.0f)));
      if (g() % 16 == 0) {
        const uint16_t b = static_cast<uint16_t>(g());
        std::memcpy(&h, &b, 2);
      }
      std::memcpy(p, &h, 2);
    } else {
      const uint64_t r = g();
      std::memcpy(p, &r, t.size);
    }
  }
}

std::string where(const Type& t, int op, int nblocks, int64_t count, bool in_place) {
  return std::string(t.name) + " " + kOpNames[op] + " nblocks=" + std::to_string(nblocks) +
         " count=" + std::to_string(count) + (in_place ? " in place" : "");
}

// First differing element, as "index i: expected <hex>, got <hex>".
std::string first_diff(const std::vector<unsigned char>& want,
                       const std::vector<unsigned char>& got, std::size_t es) {
  for (std::size_t i = 0; i < want.size() / es; ++i) {
    if (std::memcmp(want.data() + i * es, got.data() + i * es, es) == 0) continue;
    uint64_t a = 0, b = 0;
    std::memcpy(&a, want.data() + i * es, es);
    std::memcpy(&b, got.data() + i * es, es);
    char buf[128];
    std::snprintf(buf, sizeof buf, "index %zu: expected 0x%llx, got 0x%llx", i,
                  static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
    return buf;
  }
  return "";
}

}  // namespace

TEST(ReduceBlocksCapi, EveryDtypeAndOpMatchesTheReferenceBitwise) {
  std::mt19937_64 g(20240611);
  int cases = 0;
  for (const Type& t : kTypes) {
    for (int oi = 0; oi < 8; ++oi) {
      const fluxcpp_reduce_op_t op = kOps[oi];
      if (!defined(t, op)) continue;
      for (int nblocks : {1, 2, 3, 5}) {
        for (int64_t count :
             {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{33}, int64_t{1025}, int64_t{2600}}) {
          for (bool in_place : {false, true}) {
            std::vector<std::vector<unsigned char>> data(nblocks);
            std::vector<const void*> ptrs;
            for (auto& b : data) {
              b.resize(static_cast<std::size_t>(count) * t.size);
              fill(t, g, b);
              ptrs.push_back(b.data());
            }
            const int divisor = nblocks + (oi % 2);  // the group's size, or another
            std::vector<unsigned char> want(data[0].size());
            reference(t.d, op, ptrs, count, divisor, want.data());
            std::vector<unsigned char> got(data[0].size(), 0xa5);
            void* out = in_place ? data[0].data() : got.data();
            ASSERT_EQ(fluxcpp_reduce_blocks(t.d, op, ptrs.data(), nblocks, count, divisor, out),
                      FLUXCPP_SUCCESS)
                << where(t, oi, nblocks, count, in_place) << ": " << fluxcpp_last_error();
            if (in_place) got = data[0];
            ASSERT_TRUE(want == got)
                << where(t, oi, nblocks, count, in_place) << ": " << first_diff(want, got, t.size);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, (4 * 5 + 6 * 7) * 4 * 6 * 2);  // floats: 5 ops, integers and bool: 7
}

TEST(ReduceBlocksCapi, RefusesWhatIsNotDefined) {
  float a[2] = {1, 2}, out[2] = {7, 7};
  const void* blocks[1] = {a};
  EXPECT_EQ(fluxcpp_reduce_blocks(FLUXCPP_FLOAT32, FLUXCPP_REDUCE_BAND, blocks, 1, 2, 1, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fluxcpp_last_error()).find("reduce_blocks"), std::string::npos);
  int32_t i[2] = {1, 2};
  const void* iblocks[1] = {i};
  EXPECT_EQ(fluxcpp_reduce_blocks(FLUXCPP_INT32, FLUXCPP_REDUCE_AVG, iblocks, 1, 2, 1, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fluxcpp_reduce_blocks(FLUXCPP_FLOAT32, FLUXCPP_REDUCE_AVG, blocks, 1, 2, 0, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fluxcpp_reduce_blocks(FLUXCPP_FLOAT32, FLUXCPP_REDUCE_SUM, blocks, 0, 2, 1, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fluxcpp_reduce_blocks(FLUXCPP_FLOAT32, FLUXCPP_REDUCE_SUM, blocks, 1, -1, 1, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fluxcpp_reduce_blocks(static_cast<fluxcpp_dtype_t>(10), FLUXCPP_REDUCE_SUM, blocks, 1,
                                  2, 1, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fluxcpp_reduce_blocks(FLUXCPP_FLOAT32, static_cast<fluxcpp_reduce_op_t>(8), blocks, 1,
                                  2, 1, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  const void* null_block[1] = {nullptr};
  EXPECT_EQ(fluxcpp_reduce_blocks(FLUXCPP_FLOAT32, FLUXCPP_REDUCE_SUM, null_block, 1, 2, 1, out),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(out[0], 7.0f);  // untouched by every refusal
  EXPECT_EQ(
      fluxcpp_reduce_blocks(FLUXCPP_FLOAT32, FLUXCPP_REDUCE_SUM, null_block, 1, 0, 1, nullptr),
      FLUXCPP_SUCCESS);  // count 0: nothing to read or write
}

TEST(ConvertCapi, EveryHalfWidensExactlyAndNarrowsAsTheReference) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> wide(65536);
  ASSERT_EQ(fluxcpp_convert(all.data(), FLUXCPP_BFLOAT16, wide.data(), FLUXCPP_FLOAT32, 65536),
            FLUXCPP_SUCCESS);
  for (int i = 0; i < 65536; ++i) {
    const float want = ref_bf16_to_f32(all[i]);
    ASSERT_EQ(std::memcmp(&want, &wide[i], 4), 0) << "bf16 0x" << std::hex << i;
  }
  ASSERT_EQ(fluxcpp_convert(all.data(), FLUXCPP_FLOAT16, wide.data(), FLUXCPP_FLOAT32, 65536),
            FLUXCPP_SUCCESS);
  for (int i = 0; i < 65536; ++i) {
    _Float16 h;
    std::memcpy(&h, &all[i], 2);
    const float want = static_cast<float>(h);
    ASSERT_EQ(std::memcmp(&want, &wide[i], 4), 0) << "f16 0x" << std::hex << i;
  }
  // f32 -> bf16 / f16 on random bits and on the halves' neighbours (ties, overflow, NaNs).
  std::mt19937 g(7);
  std::vector<float> src;
  for (int i = 0; i < 65536; ++i) {
    uint32_t u = g();
    float f;
    std::memcpy(&f, &u, 4);
    src.push_back(f);
    src.push_back(wide[i]);
    std::memcpy(&u, &wide[i], 4);
    u += 0x1000;  // between two halves
    std::memcpy(&f, &u, 4);
    src.push_back(f);
  }
  std::vector<uint16_t> narrow(src.size());
  ASSERT_EQ(fluxcpp_convert(src.data(), FLUXCPP_FLOAT32, narrow.data(), FLUXCPP_BFLOAT16,
                            static_cast<int64_t>(src.size())),
            FLUXCPP_SUCCESS);
  for (std::size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(narrow[i], ref_f32_to_bf16(src[i])) << "f32 -> bf16 at " << i;
  ASSERT_EQ(fluxcpp_convert(src.data(), FLUXCPP_FLOAT32, narrow.data(), FLUXCPP_FLOAT16,
                            static_cast<int64_t>(src.size())),
            FLUXCPP_SUCCESS);
  for (std::size_t i = 0; i < src.size(); ++i) {
    const _Float16 h = static_cast<_Float16>(src[i]);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(narrow[i], want) << "f32 -> f16 at " << i;
  }
  EXPECT_EQ(fluxcpp_convert(src.data(), FLUXCPP_FLOAT32, narrow.data(), FLUXCPP_FLOAT64, 1),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fluxcpp_convert(src.data(), FLUXCPP_BFLOAT16, narrow.data(), FLUXCPP_FLOAT16, 1),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fluxcpp_convert(nullptr, FLUXCPP_FLOAT32, narrow.data(), FLUXCPP_BFLOAT16, 1),
            FLUXCPP_ERROR_INVALID_ARGUMENT);
}
