#include "kernels/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "fluxcpp/error.hpp"
#include "kernels/cast.hpp"

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#define FLUXCPP_REDUCE_X86 1
#include <immintrin.h>
#endif

namespace fluxcpp::kernels {
namespace {

// Elements per block: the accumulator stays on the stack (4 KiB f32 / 8 KiB f64, L1-resident)
// and every source is streamed once per block.
constexpr int64_t kBlock = 1024;
// Inner loops run in fixed chunks so that g++ vectorises them at -O2 as well as -O3.
constexpr int64_t kReduceLanes = 16;

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
  for (; i + kReduceLanes <= n; i += kReduceLanes) {
    for (int64_t j = 0; j < kReduceLanes; ++j) acc[i + j] = widen(src[i + j]);
  }
  for (; i < n; ++i) acc[i] = widen(src[i]);
}

// acc[i] += src[i]: element-wise only, so vectorising never changes the per-element order.
template <class Acc, class Src>
void add_block(Acc* __restrict acc, const Src* __restrict src, int64_t n) {
  int64_t i = 0;
  for (; i + kReduceLanes <= n; i += kReduceLanes) {
    for (int64_t j = 0; j < kReduceLanes; ++j) acc[i + j] += widen(src[i + j]);
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

// Elements [begin, count) of the sum.
template <class Acc, class Src, class Dst>
void reduce_typed(const void* const* srcs, int nsrcs, void* dst, int64_t begin, int64_t count,
                  const void* addend) {
  Acc acc[kBlock];
  Dst* out = static_cast<Dst*>(dst);
  const Dst* add = static_cast<const Dst*>(addend);
  for (int64_t base = begin; base < count; base += kBlock) {
    const int64_t n = std::min(kBlock, count - base);
    // The whole block is read into acc before dst is written, which is what makes dst == srcs[0]
    // (or any exact alias) safe.
    load_block(acc, static_cast<const Src*>(srcs[0]) + base, n);
    for (int s = 1; s < nsrcs; ++s) add_block(acc, static_cast<const Src*>(srcs[s]) + base, n);
    if (add != nullptr) add_block(acc, add + base, n);
    store_block(acc, out + base, n);
  }
}

#ifdef FLUXCPP_REDUCE_X86
// ---- AVX2 (selected at run time; the library is built for baseline x86-64) ---------------------
// One pass over the elements, 16 at a time, every source read once: acc = src0, acc += src_s in
// source order, acc += addend, rounded once on the store — per element exactly the additions of
// the portable loops, in the same order. Each vector is loaded completely before it is stored, so
// dst == srcs[0] is safe.
// When both operands of an addition are NaN, x86 returns the first source's (quietened). g++
// compiles the portable loops with the new term as the first source, so add_first() pins that
// order (the intrinsic is a plain vector +, which the compiler may commute): a NaN meeting a NaN
// comes out with the same sign and payload on both paths (Reduce.Avx2MatchesPortableBitForBit).
#define FLUXCPP_AVX2 __attribute__((target("avx2")))

// term + acc, with term as vaddps's first source.
FLUXCPP_AVX2 inline __m256 add_first(__m256 term, __m256 acc) {
  __m256 r;
  asm("vaddps %2, %1, %0" : "=x"(r) : "x"(term), "x"(acc));
  return r;
}

FLUXCPP_AVX2 inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
// bf16 -> f32 is exact: the 16 bits become the upper half (as kernels::bf16_to_f32).
FLUXCPP_AVX2 inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

FLUXCPP_AVX2 inline void store8(float* p, __m256 v) {
  _mm256_storeu_ps(p, v);
}
// The arithmetic of kernels::f32_to_bf16 (and of inplace_cast's AVX2 body): add 0x7fff plus the
// lowest kept bit (nearest even; a carry into the exponent rounds up to the next binade or to
// Inf); a NaN keeps its sign and gets the quiet bit instead, so rounding cannot turn it into Inf.
// The bf16 bits end sign-extended in each 32-bit lane, which packs_epi32 passes unchanged.
FLUXCPP_AVX2 inline void store8(uint16_t* p, __m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  const __m256 quiet = _mm256_or_ps(f, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
  const __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(rounded), quiet, nan);
  const __m256i bits = _mm256_srai_epi32(_mm256_castps_si256(r), 16);
  const __m128i packed =
      _mm_packs_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// Converts [0, returned) of the count elements; the caller sums the rest with the portable loops.
template <class Src, class Dst>
FLUXCPP_AVX2 int64_t reduce_avx2(const void* const* srcs, int nsrcs, void* dst, int64_t count,
                                 const void* addend) {
  const Src* s0 = static_cast<const Src*>(srcs[0]);
  Dst* out = static_cast<Dst*>(dst);
  const Dst* add = static_cast<const Dst*>(addend);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256 a = load8(s0 + i), b = load8(s0 + i + 8);
    for (int s = 1; s < nsrcs; ++s) {
      const Src* p = static_cast<const Src*>(srcs[s]) + i;
      a = add_first(load8(p), a);
      b = add_first(load8(p + 8), b);
    }
    if (add != nullptr) {
      a = add_first(load8(add + i), a);
      b = add_first(load8(add + i + 8), b);
    }
    store8(out + i, a);
    store8(out + i + 8, b);
  }
  for (; i + 8 <= count; i += 8) {
    __m256 a = load8(s0 + i);
    for (int s = 1; s < nsrcs; ++s) a = add_first(load8(static_cast<const Src*>(srcs[s]) + i), a);
    if (add != nullptr) a = add_first(load8(add + i), a);
    store8(out + i, a);
  }
  return i;
}

#undef FLUXCPP_AVX2

// ---- AVX-512 (AVX512F): the same additions and rounding as the AVX2 body, 16 lanes a vector ----
#define FLUXCPP_AVX512 __attribute__((target("avx512f")))

FLUXCPP_AVX512 inline __m512 add_first(__m512 term, __m512 acc) {
  __m512 r;
  asm("vaddps %2, %1, %0" : "=v"(r) : "v"(term), "v"(acc));
  return r;
}

FLUXCPP_AVX512 inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
FLUXCPP_AVX512 inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

FLUXCPP_AVX512 inline void store16(float* p, __m512 v) {
  _mm512_storeu_ps(p, v);
}
// store8's arithmetic on 16 lanes; the lanes' upper halves are the bf16 bits, which vpmovdw
// (truncating) packs.
FLUXCPP_AVX512 inline void store16(uint16_t* p, __m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  const __m512i quiet = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
  const __m512i r = _mm512_mask_blend_epi32(nan, rounded, quiet);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
}

template <class Src, class Dst>
FLUXCPP_AVX512 int64_t reduce_avx512(const void* const* srcs, int nsrcs, void* dst, int64_t count,
                                     const void* addend) {
  const Src* s0 = static_cast<const Src*>(srcs[0]);
  Dst* out = static_cast<Dst*>(dst);
  const Dst* add = static_cast<const Dst*>(addend);
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    __m512 a = load16(s0 + i), b = load16(s0 + i + 16);
    for (int s = 1; s < nsrcs; ++s) {
      const Src* p = static_cast<const Src*>(srcs[s]) + i;
      a = add_first(load16(p), a);
      b = add_first(load16(p + 16), b);
    }
    if (add != nullptr) {
      a = add_first(load16(add + i), a);
      b = add_first(load16(add + i + 16), b);
    }
    store16(out + i, a);
    store16(out + i + 16, b);
  }
  for (; i + 16 <= count; i += 16) {
    __m512 a = load16(s0 + i);
    for (int s = 1; s < nsrcs; ++s) a = add_first(load16(static_cast<const Src*>(srcs[s]) + i), a);
    if (add != nullptr) a = add_first(load16(add + i), a);
    store16(out + i, a);
  }
  return i;
}

#undef FLUXCPP_AVX512

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}
bool have_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}
#else
bool have_avx2() {
  return false;
}
bool have_avx512() {
  return false;
}
#endif

// The f32/bf16 sums: AVX-512 or AVX2 over whole vectors when chosen, the portable loops for the
// rest.
template <class Src, class Dst>
void reduce_f32(ReduceIsa isa, const void* const* srcs, int nsrcs, void* dst, int64_t count,
                const void* addend) {
  int64_t done = 0;
#ifdef FLUXCPP_REDUCE_X86
  if (isa == ReduceIsa::kAvx512) done = reduce_avx512<Src, Dst>(srcs, nsrcs, dst, count, addend);
  if (isa == ReduceIsa::kAvx2) done = reduce_avx2<Src, Dst>(srcs, nsrcs, dst, count, addend);
#else
  (void)isa;
#endif
  reduce_typed<float, Src, Dst>(srcs, nsrcs, dst, done, count, addend);
}

[[noreturn]] void invalid(const std::string& msg) {
  throw Error(Errc::kInvalidArgument, "reduce_sum: " + msg);
}

}  // namespace

bool reduce_isa_available(ReduceIsa isa) {
  return (isa != ReduceIsa::kAvx2 || have_avx2()) && (isa != ReduceIsa::kAvx512 || have_avx512());
}

void reduce_sum(DType src_dtype, const void* const* srcs, int nsrcs, DType dst_dtype, void* dst,
                int64_t count, const void* addend) {
  reduce_sum(ReduceIsa::kAuto, src_dtype, srcs, nsrcs, dst_dtype, dst, count, addend);
}

void reduce_sum(ReduceIsa isa, DType src_dtype, const void* const* srcs, int nsrcs, DType dst_dtype,
                void* dst, int64_t count, const void* addend) {
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

  if (f64_pair) return reduce_typed<double, double, double>(srcs, nsrcs, dst, 0, count, addend);
  if (isa == ReduceIsa::kAuto)
    isa = have_avx512() ? ReduceIsa::kAvx512 : have_avx2() ? ReduceIsa::kAvx2 : ReduceIsa::kPortable;
  else if (!reduce_isa_available(isa))
    isa = ReduceIsa::kPortable;
  if (src_dtype == DType::kFloat32) {
    if (dst_dtype == DType::kFloat32)
      return reduce_f32<float, float>(isa, srcs, nsrcs, dst, count, addend);
    return reduce_f32<float, uint16_t>(isa, srcs, nsrcs, dst, count, addend);
  }
  if (dst_dtype == DType::kFloat32)
    return reduce_f32<uint16_t, float>(isa, srcs, nsrcs, dst, count, addend);
  return reduce_f32<uint16_t, uint16_t>(isa, srcs, nsrcs, dst, count, addend);
}

void add_bias(DType acc, void* dst, int64_t rows, int64_t n, const void* bias, DType bias_dtype) {
  if (acc == DType::kFloat64) {
    auto* p = static_cast<double*>(dst);
    const auto* b = static_cast<const double*>(bias);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) p[i * n + j] += b[j];
    return;
  }
  auto* p = static_cast<float*>(dst);
  if (bias_dtype == DType::kBFloat16) {
    const auto* b = static_cast<const uint16_t*>(bias);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) p[i * n + j] += bf16_to_f32(b[j]);
    return;
  }
  const auto* b = static_cast<const float*>(bias);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) p[i * n + j] += b[j];
}

}  // namespace fluxcpp::kernels
