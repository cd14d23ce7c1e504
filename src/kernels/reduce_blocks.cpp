#include "kernels/reduce_blocks.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "fluxcpp/error.hpp"
#include "fluxcpp/types.hpp"
#include "kernels/cast.hpp"
#include "kernels/reduce.hpp"

namespace fluxcpp::kernels {
namespace {

// Elements per chunk: the accumulator stays on the stack (L1-resident) and every block is
// streamed once per chunk. Per element the combinations run in block order whatever the chunk,
// so chunking (and the compiler's vectorising of the inner loops) never changes a bit.
constexpr int64_t kChunk = 1024;

// How one element type is widened to its accumulator and narrowed back.
template <class T>
struct Plain {
  using Acc = T;
  static void widen(const void* src, int64_t n, Acc* acc) {
    const T* s = static_cast<const T*>(src);
    std::copy(s, s + n, acc);
  }
  static void narrow(const Acc* acc, int64_t n, void* dst) {
    std::copy(acc, acc + n, static_cast<T*>(dst));
  }
};
// A 16-bit floating type (bf16, f16): accumulates in f32 through the type's converters.
template <void (*ToF32)(const uint16_t*, float*, int64_t),
          void (*FromF32)(const float*, uint16_t*, int64_t)>
struct Half {
  using Acc = float;
  static void widen(const void* src, int64_t n, Acc* acc) {
    ToF32(static_cast<const uint16_t*>(src), acc, n);
  }
  static void narrow(const Acc* acc, int64_t n, void* dst) {
    FromF32(acc, static_cast<uint16_t*>(dst), n);
  }
};
using BF16 = Half<bf16_to_f32, f32_to_bf16>;
using F16 = Half<f16_to_f32, f32_to_f16>;
struct Bool {  // accumulates 0 or 1, so "and", "or" and "not equal" are &, | and ^
  using Acc = uint8_t;
  static void widen(const void* src, int64_t n, Acc* acc) {
    const auto* s = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) acc[i] = s[i] != 0 ? 1 : 0;
  }
  static void narrow(const Acc* acc, int64_t n, void* dst) {
    std::copy(acc, acc + n, static_cast<uint8_t*>(dst));
  }
};

// Integer sums and products wrap: they run on an unsigned type at least as wide as unsigned int,
// so no promotion to int can overflow.
template <class A, bool = std::is_integral_v<A>>
struct Wide {
  using type = A;
};
template <class A>
struct Wide<A, true> {
  using type = std::common_type_t<std::make_unsigned_t<A>, unsigned>;
};

// a (op) b on the accumulator type A.
template <class A>
struct Ops {
  using W = typename Wide<A>::type;
  static A sum(A a, A b) { return static_cast<A>(static_cast<W>(a) + static_cast<W>(b)); }
  static A product(A a, A b) { return static_cast<A>(static_cast<W>(a) * static_cast<W>(b)); }
  // A NaN wins, as in torch: a comparison with NaN is false either way.
  static A min(A a, A b) {
    if constexpr (std::is_floating_point_v<A>)
      return (a != a || a < b) ? a : b;
    else
      return a < b ? a : b;
  }
  static A max(A a, A b) {
    if constexpr (std::is_floating_point_v<A>)
      return (a != a || a > b) ? a : b;
    else
      return a > b ? a : b;
  }
  static A band(A a, A b) { return static_cast<A>(a & b); }
  static A bor(A a, A b) { return static_cast<A>(a | b); }
  static A bxor(A a, A b) { return static_cast<A>(a ^ b); }
};

template <class A, A (*F)(A, A)>
void combine_into(A* __restrict acc, const A* __restrict term, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = F(acc[i], term[i]);
}

// One chunk: acc = block 0, then every further block combined in, then avg's division.
template <class S, typename S::Acc (*F)(typename S::Acc, typename S::Acc)>
void reduce_generic(const void* const* blocks, int nblocks, int64_t count, int divisor, bool avg,
                    void* out) {
  using A = typename S::Acc;
  const int64_t es =
      static_cast<int64_t>(std::is_same_v<S, BF16> || std::is_same_v<S, F16> ? 2 : sizeof(A));
  A acc[kChunk];
  A term[kChunk];
  for (int64_t base = 0; base < count; base += kChunk) {
    const int64_t n = std::min(kChunk, count - base);
    const int64_t off = base * es;
    // Every block's chunk is read before out's is written: out may be a block.
    S::widen(static_cast<const char*>(blocks[0]) + off, n, acc);
    for (int b = 1; b < nblocks; ++b) {
      S::widen(static_cast<const char*>(blocks[b]) + off, n, term);
      combine_into<A, F>(acc, term, n);
    }
    if constexpr (std::is_floating_point_v<A>) {
      if (avg)
        for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] / static_cast<A>(divisor);
    }
    S::narrow(acc, n, static_cast<char*>(out) + off);
  }
}

template <class S>
void reduce_on(ReduceOp op, const void* const* blocks, int nblocks, int64_t count, int divisor,
               void* out) {
  using A = typename S::Acc;
  using O = Ops<A>;
  switch (op) {
    case ReduceOp::kSum: return reduce_generic<S, O::sum>(blocks, nblocks, count, 1, false, out);
    case ReduceOp::kAvg:
      return reduce_generic<S, O::sum>(blocks, nblocks, count, divisor, true, out);
    case ReduceOp::kProduct:
      return reduce_generic<S, O::product>(blocks, nblocks, count, 1, false, out);
    case ReduceOp::kMin: return reduce_generic<S, O::min>(blocks, nblocks, count, 1, false, out);
    case ReduceOp::kMax: return reduce_generic<S, O::max>(blocks, nblocks, count, 1, false, out);
    default: break;
  }
  if constexpr (std::is_integral_v<A>) {  // the caller checked: bitwise ops on integers only
    switch (op) {
      case ReduceOp::kBand:
        return reduce_generic<S, O::band>(blocks, nblocks, count, 1, false, out);
      case ReduceOp::kBor: return reduce_generic<S, O::bor>(blocks, nblocks, count, 1, false, out);
      case ReduceOp::kBxor:
        return reduce_generic<S, O::bxor>(blocks, nblocks, count, 1, false, out);
      default: break;
    }
  }
}

// Bool's sum and max are "or", product and min "and": the accumulator is 0 or 1.
void reduce_bool(ReduceOp op, const void* const* blocks, int nblocks, int64_t count, void* out) {
  using O = Ops<uint8_t>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBor: return reduce_generic<Bool, O::bor>(blocks, nblocks, count, 1, false, out);
    case ReduceOp::kBxor:
      return reduce_generic<Bool, O::bxor>(blocks, nblocks, count, 1, false, out);
    default:  // product, min, band
      return reduce_generic<Bool, O::band>(blocks, nblocks, count, 1, false, out);
  }
}

// The f32/bf16/f64 sums and averages on reduce_sum (vectorised; the same additions in the same
// order as reduce_generic), an average divided in f32 (f64) chunk by chunk before rounding.
void sum_floating(Elem e, bool avg, const void* const* blocks, int nblocks, int64_t count,
                  int divisor, void* out) {
  if (e == Elem::kF64 || e == Elem::kF32) {
    const DType d = e == Elem::kF64 ? DType::kFloat64 : DType::kFloat32;
    reduce_sum(d, blocks, nblocks, d, out, count);
    if (!avg) return;
    if (e == Elem::kF64) {
      auto* o = static_cast<double*>(out);
      for (int64_t i = 0; i < count; ++i) o[i] = o[i] / static_cast<double>(divisor);
    } else {
      auto* o = static_cast<float*>(out);
      for (int64_t i = 0; i < count; ++i) o[i] = o[i] / static_cast<float>(divisor);
    }
    return;
  }
  if (!avg) return reduce_sum(DType::kBFloat16, blocks, nblocks, DType::kBFloat16, out, count);
  std::vector<const void*> at(static_cast<std::size_t>(nblocks));
  float acc[kChunk];
  for (int64_t base = 0; base < count; base += kChunk) {
    const int64_t n = std::min(kChunk, count - base);
    for (int b = 0; b < nblocks; ++b) at[b] = static_cast<const uint16_t*>(blocks[b]) + base;
    reduce_sum(DType::kBFloat16, at.data(), nblocks, DType::kFloat32, acc, n);
    for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] / static_cast<float>(divisor);
    f32_to_bf16(acc, static_cast<uint16_t*>(out) + base, n);
  }
}

[[noreturn]] void refuse(const std::string& msg) {
  throw Error(Errc::kInvalidArgument, "reduce_blocks: " + msg);
}

bool is_floating(Elem e) {
  return e == Elem::kF32 || e == Elem::kF64 || e == Elem::kBF16 || e == Elem::kF16;
}

}  // namespace

bool reduce_blocks_supported(Elem e, ReduceOp op) {
  const int ei = static_cast<int>(e), oi = static_cast<int>(op);
  if (ei < 0 || ei > static_cast<int>(Elem::kBool)) return false;
  if (oi < 0 || oi > static_cast<int>(ReduceOp::kBxor)) return false;
  if (op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor)
    return !is_floating(e);
  if (op == ReduceOp::kAvg) return is_floating(e);
  return true;
}

void reduce_blocks(Elem e, ReduceOp op, const void* const* blocks, int nblocks, int64_t count,
                   int divisor, void* out) {
  if (!reduce_blocks_supported(e, op))
    refuse("reduction " + std::to_string(static_cast<int>(op)) + " is not defined on dtype " +
            std::to_string(static_cast<int>(e)) +
            " (bitwise ops: integers and bool; avg: floating types)");
  if (nblocks < 1) refuse("nblocks must be >= 1, got " + std::to_string(nblocks));
  if (count < 0) refuse("negative count " + std::to_string(count));
  if (op == ReduceOp::kAvg && divisor < 1)
    refuse("avg needs divisor >= 1, got " + std::to_string(divisor));
  if (count == 0) return;
  if (blocks == nullptr) refuse("blocks is null");
  if (out == nullptr) refuse("out is null");
  for (int b = 0; b < nblocks; ++b)
    if (blocks[b] == nullptr) refuse("blocks[" + std::to_string(b) + "] is null");

  const bool sum_like = op == ReduceOp::kSum || op == ReduceOp::kAvg;
  if (sum_like && e != Elem::kF16 && is_floating(e))
    return sum_floating(e, op == ReduceOp::kAvg, blocks, nblocks, count, divisor, out);
  switch (e) {
    case Elem::kF32: return reduce_on<Plain<float>>(op, blocks, nblocks, count, divisor, out);
    case Elem::kF64: return reduce_on<Plain<double>>(op, blocks, nblocks, count, divisor, out);
    case Elem::kBF16: return reduce_on<BF16>(op, blocks, nblocks, count, divisor, out);
    case Elem::kF16: return reduce_on<F16>(op, blocks, nblocks, count, divisor, out);
    case Elem::kI8: return reduce_on<Plain<int8_t>>(op, blocks, nblocks, count, divisor, out);
    case Elem::kU8: return reduce_on<Plain<uint8_t>>(op, blocks, nblocks, count, divisor, out);
    case Elem::kI16: return reduce_on<Plain<int16_t>>(op, blocks, nblocks, count, divisor, out);
    case Elem::kI32: return reduce_on<Plain<int32_t>>(op, blocks, nblocks, count, divisor, out);
    case Elem::kI64: return reduce_on<Plain<int64_t>>(op, blocks, nblocks, count, divisor, out);
    case Elem::kBool: return reduce_bool(op, blocks, nblocks, count, out);
  }
}

}  // namespace fluxcpp::kernels
