#include "kernels/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "fluxcpp/error.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::kernels {
namespace {

// Elements per block: the accumulator stays on the stack (4 KiB f32 / 8 KiB f64, L1-resident)
// and every source is streamed once per block.
constexpr int64_t kBlock = 1024;
// Inner loops run in fixed chunks so that g++ vectorises them at -O2 as well as -O3.
constexpr int64_t kLanes = 16;

// uint16_t only ever carries bf16 in this file.
inline float widen(uint16_t v) {
  return bf16_to_f32(v);
}
inline float widen(float v) {
  return v;
}
inline double widen(double v) {
  return v;
}

template <class Acc, class Src>
void load_block(Acc* __restrict acc, const Src* __restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[i + j] = widen(src[i + j]);
  }
  for (; i < n; ++i) acc[i] = widen(src[i]);
}

// acc[i] += src[i]: element-wise only, so vectorising never changes the per-element order.
template <class Acc, class Src>
void add_block(Acc* __restrict acc, const Src* __restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[i + j] += widen(src[i + j]);
  }
  for (; i < n; ++i) acc[i] += widen(src[i]);
}

template <class Acc>
void store_block(const Acc* acc, Acc* dst, int64_t n) {
  std::copy(acc, acc + n, dst);
}
void store_block(const float* acc, uint16_t* dst, int64_t n) {
  f32_to_bf16(acc, dst, n);
}

template <class Acc, class Src, class Dst>
void reduce_typed(const void* const* srcs, int nsrcs, void* dst, int64_t count,
                  const void* addend) {
  Acc acc[kBlock];
  Dst* out = static_cast<Dst*>(dst);
  const Dst* add = static_cast<const Dst*>(addend);
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t n = std::min(kBlock, count - base);
    // The whole block is read into acc before dst is written, which is what makes dst == srcs[0]
    // (or any exact alias) safe.
    load_block(acc, static_cast<const Src*>(srcs[0]) + base, n);
    for (int s = 1; s < nsrcs; ++s) add_block(acc, static_cast<const Src*>(srcs[s]) + base, n);
    if (add != nullptr) add_block(acc, add + base, n);
    store_block(acc, out + base, n);
  }
}

[[noreturn]] void invalid(const std::string& msg) {
  throw Error(Errc::kInvalidArgument, "reduce_sum: " + msg);
}

}  // namespace

void reduce_sum(DType src_dtype, const void* const* srcs, int nsrcs, DType dst_dtype, void* dst,
                int64_t count, const void* addend) {
  if (nsrcs < 1) invalid("nsrcs must be >= 1, got " + std::to_string(nsrcs));
  if (count < 0) invalid("negative count " + std::to_string(count));
  if (srcs == nullptr) invalid("srcs is null");
  const bool f64_pair = src_dtype == DType::kFloat64 && dst_dtype == DType::kFloat64;
  const bool f32_src = src_dtype == DType::kFloat32 || src_dtype == DType::kBFloat16;
  const bool f32_dst = dst_dtype == DType::kFloat32 || dst_dtype == DType::kBFloat16;
  if (!f64_pair && !(f32_src && f32_dst)) {
    invalid(std::string("unsupported dtype pair ") + dtype_name(src_dtype) + " -> " +
            dtype_name(dst_dtype));
  }
  if (count == 0) return;
  if (dst == nullptr) invalid("dst is null");
  for (int s = 0; s < nsrcs; ++s) {
    if (srcs[s] == nullptr) invalid("srcs[" + std::to_string(s) + "] is null");
  }

  if (f64_pair) return reduce_typed<double, double, double>(srcs, nsrcs, dst, count, addend);
  if (src_dtype == DType::kFloat32) {
    if (dst_dtype == DType::kFloat32) {
      return reduce_typed<float, float, float>(srcs, nsrcs, dst, count, addend);
    }
    return reduce_typed<float, float, uint16_t>(srcs, nsrcs, dst, count, addend);
  }
  if (dst_dtype == DType::kFloat32) {
    return reduce_typed<float, uint16_t, float>(srcs, nsrcs, dst, count, addend);
  }
  return reduce_typed<float, uint16_t, uint16_t>(srcs, nsrcs, dst, count, addend);
}

}  // namespace fluxcpp::kernels
