// Element-wise reductions over every scalar type of the backend, in a fixed block order.
#include "scalar.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace fluxcpp::backend {
namespace {

float bf16_to_f32(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t f32_to_bf16(float f) {  // round to nearest even; a NaN stays a (quiet) NaN
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// How one storage type is widened, combined and narrowed.
template <typename T>
struct Plain {
  using Acc = T;
  static Acc load(const void* p, int64_t i) { return static_cast<const T*>(p)[i]; }
  static void store(void* p, int64_t i, Acc v) { static_cast<T*>(p)[i] = v; }
};
struct BF16 {
  using Acc = float;
  static Acc load(const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); }
  static void store(void* p, int64_t i, Acc v) { static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); }
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

template <typename A>
A combine(Reduce r, A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    switch (r) {
      case Reduce::kSum: case Reduce::kMax: case Reduce::kBor: return a || b;
      case Reduce::kBxor: return a != b;
      default: return a && b;  // product, min, band
    }
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;  // sums and products wrap, as torch's do
    switch (r) {
      case Reduce::kSum: return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
      case Reduce::kProduct: return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
      case Reduce::kMin: return std::min(a, b);
      case Reduce::kMax: return std::max(a, b);
      case Reduce::kBand: return static_cast<A>(a & b);
      case Reduce::kBor: return static_cast<A>(a | b);
      case Reduce::kBxor: return static_cast<A>(a ^ b);
      default: return a;
    }
  } else {
    switch (r) {
      case Reduce::kSum: case Reduce::kAvg: return a + b;
      case Reduce::kProduct: return a * b;
      // NaN wins, as torch's min/max: a comparison with NaN is false either way.
      case Reduce::kMin: return (a != a || a < b) ? a : b;
      case Reduce::kMax: return (a != a || a > b) ? a : b;
      default: return a;
    }
  }
}

template <typename S>
void reduce_typed(Reduce r, const void* const* blocks, int nblocks, int64_t count, void* out,
                  int divisor) {
  using A = typename S::Acc;
  for (int64_t i = 0; i < count; ++i) {
    A acc = S::load(blocks[0], i);
    for (int b = 1; b < nblocks; ++b) acc = combine<A>(r, acc, S::load(blocks[b], i));
    if constexpr (std::is_floating_point_v<A>)
      if (r == Reduce::kAvg) acc = acc / static_cast<A>(divisor);
    S::store(out, i, acc);
  }
}

}  // namespace

std::size_t scalar_size(Scalar s) {
  switch (s) {
    case Scalar::kF64: case Scalar::kI64: return 8;
    case Scalar::kF32: case Scalar::kI32: return 4;
    case Scalar::kBF16: case Scalar::kF16: case Scalar::kI16: return 2;
    case Scalar::kI8: case Scalar::kU8: case Scalar::kBool: return 1;
  }
  return 0;
}

const char* scalar_name(Scalar s) {
  switch (s) {
    case Scalar::kF32: return "float32";
    case Scalar::kF64: return "float64";
    case Scalar::kBF16: return "bfloat16";
    case Scalar::kF16: return "float16";
    case Scalar::kI8: return "int8";
    case Scalar::kU8: return "uint8";
    case Scalar::kI16: return "int16";
    case Scalar::kI32: return "int32";
    case Scalar::kI64: return "int64";
    case Scalar::kBool: return "bool";
  }
  return "invalid";
}

const char* reduce_name(Reduce r) {
  switch (r) {
    case Reduce::kSum: return "SUM";
    case Reduce::kAvg: return "AVG";
    case Reduce::kProduct: return "PRODUCT";
    case Reduce::kMin: return "MIN";
    case Reduce::kMax: return "MAX";
    case Reduce::kBand: return "BAND";
    case Reduce::kBor: return "BOR";
    case Reduce::kBxor: return "BXOR";
  }
  return "invalid";
}

bool is_floating(Scalar s) {
  return s == Scalar::kF32 || s == Scalar::kF64 || s == Scalar::kBF16 || s == Scalar::kF16;
}

bool reduce_supported(Scalar s, Reduce r) {
  if (r == Reduce::kBand || r == Reduce::kBor || r == Reduce::kBxor) return !is_floating(s);
  if (r == Reduce::kAvg) return is_floating(s);
  return true;
}

void reduce_blocks(Scalar s, Reduce r, const void* const* blocks, int nblocks, int64_t count,
                   void* out, int divisor) {
  switch (s) {
    case Scalar::kF32: return reduce_typed<Plain<float>>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kF64: return reduce_typed<Plain<double>>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kBF16: return reduce_typed<BF16>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kF16: return reduce_typed<F16>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kI8: return reduce_typed<Plain<int8_t>>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kU8: return reduce_typed<Plain<uint8_t>>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kI16: return reduce_typed<Plain<int16_t>>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kI32: return reduce_typed<Plain<int32_t>>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kI64: return reduce_typed<Plain<int64_t>>(r, blocks, nblocks, count, out, divisor);
    case Scalar::kBool: return reduce_typed<Bool>(r, blocks, nblocks, count, out, divisor);
  }
}

}  // namespace fluxcpp::backend
