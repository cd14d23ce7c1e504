#include "kernels/inplace_cast_x86.hpp"

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#define FLUXCPP_CAST_X86 1
#include <immintrin.h>
#endif

namespace fluxcpp::kernels::x86 {

#ifdef FLUXCPP_CAST_X86
namespace {

// Unaligned loads and stores throughout: the C ABI accepts any address. The intrinsics access
// memory through may_alias vector types, so the compiler keeps every store after the loads of
// the same iteration, which is all the in-place walk needs (see inplace_cast_kernel.hpp).

// ---- SSE2 (the x86-64 baseline) ----------------------------------------------------------------

// f32 bits -> bf16 bits in the low half of each 32-bit lane, sign-extended so that packs_epi32
// (signed saturation, the only 32->16 pack SSE2 has) passes them through unchanged. Same
// arithmetic as kernels::f32_to_bf16: add 0x7fff plus the lowest kept bit (nearest even; a carry
// into the exponent rounds up to the next binade or to Inf); NaN keeps its sign and gets the
// quiet bit instead, so rounding can never turn it into Inf.
// The NaN test is one unordered compare of the lanes as floats (the caller runs it under the
// default MXCSR, so a signalling NaN cannot trap and DAZ cannot matter).
inline __m128i bf16_bits_sse2(__m128i u) {
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1));
  const __m128i rounded = _mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7fff)), lsb);
  const __m128 f = _mm_castsi128_ps(u);
  const __m128i nan = _mm_castps_si128(_mm_cmpunord_ps(f, f));
  const __m128i quiet = _mm_or_si128(u, _mm_set1_epi32(0x00400000));
  const __m128i r = _mm_or_si128(_mm_and_si128(nan, quiet), _mm_andnot_si128(nan, rounded));
  return _mm_srai_epi32(r, 16);
}

int64_t f32_to_bf16_sse2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {  // reads [4i, 4i+32), writes [2i, 2i+16)
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * i));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * i + 16));
    const __m128i packed = _mm_packs_epi32(bf16_bits_sse2(x), bf16_bits_sse2(y));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 2 * i), packed);
  }
  return i;
}

// cvtpd2ps rounds by MXCSR (the caller sets nearest even), gives +-Inf on overflow, and turns a
// NaN into a quiet NaN with its sign.
int64_t f64_to_f32_sse2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 4 <= e; i += 4) {  // reads [8i, 8i+32), writes [4i, 4i+16)
    const __m128d x = _mm_loadu_pd(reinterpret_cast<const double*>(p + 8 * i));
    const __m128d y = _mm_loadu_pd(reinterpret_cast<const double*>(p + 8 * i + 16));
    _mm_storeu_ps(reinterpret_cast<float*>(p + 4 * i),
                  _mm_movelh_ps(_mm_cvtpd_ps(x), _mm_cvtpd_ps(y)));
  }
  return i;
}

int64_t bf16_to_f32_sse2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = e;
  const __m128i zero = _mm_setzero_si128();
  for (; i - 8 >= b; i -= 8) {  // block [i-8, i): reads [2i-16, 2i), writes [4i-32, 4i)
    const int64_t j = i - 8;
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * j));
    // A signalling NaN gets its quiet bit, as the f32 -> f64 hardware conversion does.
    const __m128i magnitude = _mm_and_si128(v, _mm_set1_epi16(0x7fff));
    const __m128i nan = _mm_cmpgt_epi16(magnitude, _mm_set1_epi16(0x7f80));
    v = _mm_or_si128(v, _mm_and_si128(nan, _mm_set1_epi16(0x0040)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 4 * j), _mm_unpacklo_epi16(zero, v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 4 * j + 16), _mm_unpackhi_epi16(zero, v));
  }
  return i;
}

int64_t f32_to_f64_sse2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = e;
  for (; i - 4 >= b; i -= 4) {  // block [i-4, i): reads [4i-16, 4i), writes [8i-32, 8i)
    const int64_t j = i - 4;
    const __m128 f = _mm_loadu_ps(reinterpret_cast<const float*>(p + 4 * j));
    _mm_storeu_pd(reinterpret_cast<double*>(p + 8 * j), _mm_cvtps_pd(f));
    _mm_storeu_pd(reinterpret_cast<double*>(p + 8 * j + 16), _mm_cvtps_pd(_mm_movehl_ps(f, f)));
  }
  return i;
}

// ---- AVX2 (selected at run time; the library is built for baseline x86-64) ---------------------

#define FLUXCPP_AVX2 __attribute__((target("avx2")))

FLUXCPP_AVX2 inline __m256i bf16_bits_avx2(__m256i u) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256 f = _mm256_castsi256_ps(u);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  const __m256 quiet = _mm256_or_ps(f, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
  const __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(rounded), quiet, nan);
  return _mm256_srai_epi32(_mm256_castps_si256(r), 16);
}

FLUXCPP_AVX2 int64_t f32_to_bf16_avx2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 16 <= e; i += 16) {  // reads [4i, 4i+64), writes [2i, 2i+32)
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * i));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * i + 32));
    // packs works per 128-bit lane: quadwords come out x0-3, y0-3, x4-7, y4-7; put them in order.
    const __m256i packed = _mm256_packs_epi32(bf16_bits_avx2(x), bf16_bits_avx2(y));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 2 * i),
                        _mm256_permute4x64_epi64(packed, 0xD8));
  }
  return i;
}

FLUXCPP_AVX2 int64_t f64_to_f32_avx2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {  // reads [8i, 8i+64), writes [4i, 4i+32)
    const __m256d x = _mm256_loadu_pd(reinterpret_cast<const double*>(p + 8 * i));
    const __m256d y = _mm256_loadu_pd(reinterpret_cast<const double*>(p + 8 * i + 32));
    const __m256 r =
        _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(x)), _mm256_cvtpd_ps(y), 1);
    _mm256_storeu_ps(reinterpret_cast<float*>(p + 4 * i), r);
  }
  return i;
}

FLUXCPP_AVX2 inline __m256i f32_bits_avx2(__m128i bf16) {
  const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16);
  const __m256i magnitude = _mm256_and_si256(w, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  return _mm256_or_si256(w, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000)));
}

FLUXCPP_AVX2 int64_t bf16_to_f32_avx2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = e;
  for (; i - 16 >= b; i -= 16) {  // block [i-16, i): reads [2i-32, 2i), writes [4i-64, 4i)
    const int64_t j = i - 16;
    // Both halves are loaded before either is stored: for j < 16 the first store reaches them.
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * j));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * j + 16));
    const __m256i wx = f32_bits_avx2(x), wy = f32_bits_avx2(y);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 4 * j), wx);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 4 * j + 32), wy);
  }
  return i;
}

FLUXCPP_AVX2 int64_t f32_to_f64_avx2(unsigned char* p, int64_t b, int64_t e) {
  int64_t i = e;
  for (; i - 8 >= b; i -= 8) {  // block [i-8, i): reads [4i-32, 4i), writes [8i-64, 8i)
    const int64_t j = i - 8;
    const __m256 f = _mm256_loadu_ps(reinterpret_cast<const float*>(p + 4 * j));
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
    _mm256_storeu_pd(reinterpret_cast<double*>(p + 8 * j), lo);
    _mm256_storeu_pd(reinterpret_cast<double*>(p + 8 * j + 32), hi);
  }
  return i;
}

#undef FLUXCPP_AVX2

}  // namespace

const Bodies* sse2_bodies() {
  static const Bodies b{f32_to_bf16_sse2, f64_to_f32_sse2, bf16_to_f32_sse2, f32_to_f64_sse2};
  return &b;
}

const Bodies* avx2_bodies() {
  static const Bodies b{f32_to_bf16_avx2, f64_to_f32_avx2, bf16_to_f32_avx2, f32_to_f64_avx2};
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok ? &b : nullptr;
}

#else  // not x86 with SSE2: scalar code only

const Bodies* sse2_bodies() {
  return nullptr;
}
const Bodies* avx2_bodies() {
  return nullptr;
}

#endif

}  // namespace fluxcpp::kernels::x86
