// inplace_cast test support: a reference conversion written without the library's kernels or the
// hardware conversions (fields decoded into an exact double, rounded by scaling to an integer
// with nearbyint, encoded field by field), test inputs rich in the cases the contract names
// (NaN of both signs with quiet and signalling payloads, +-Inf, +-0, denormals, ties, values that
// overflow when narrowed), and the comparison: bit for bit, except that an expected NaN matches
// any quiet NaN of the same sign. Header-only; no MPI.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "fluxcpp/types.hpp"

namespace fluxcpp::test {

struct CastPair {
  DType from, to;
};
inline const std::vector<CastPair>& cast_pairs() {
  static const std::vector<CastPair> p = {{DType::kFloat32, DType::kBFloat16},
                                          {DType::kFloat64, DType::kFloat32},
                                          {DType::kBFloat16, DType::kFloat32},
                                          {DType::kFloat32, DType::kFloat64}};
  return p;
}
inline std::string pair_name(CastPair p) {
  return std::string(dtype_name(p.from)) + "->" + dtype_name(p.to);
}

// The sizes of FLUX's InplaceCast tests, and small ones around the vector widths.
inline const std::vector<int64_t>& cast_odd_sizes() {
  static const std::vector<int64_t> s = {1048571, 2097143, 4194301, 8388605};
  return s;
}
inline const std::vector<int64_t>& cast_small_sizes() {
  static const std::vector<int64_t> s = {0, 1, 7, 15, 16, 17, 33};
  return s;
}

// An IEEE binary format: bf16 (8, 7), f32 (8, 23), f64 (11, 52).
struct Format {
  int exp_bits, mant_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int bytes() const { return (1 + exp_bits + mant_bits) / 8; }
};
inline Format format_of(DType t) {
  if (t == DType::kBFloat16) return {8, 7};
  if (t == DType::kFloat32) return {8, 23};
  return {11, 52};
}

inline uint64_t load_bits(const unsigned char* p, DType t, int64_t i) {
  const int n = format_of(t).bytes();
  uint64_t v = 0;
  std::memcpy(&v, p + static_cast<std::size_t>(i) * n, static_cast<std::size_t>(n));  // LE
  return v;
}
inline void store_bits(unsigned char* p, DType t, int64_t i, uint64_t v) {
  const int n = format_of(t).bytes();
  std::memcpy(p + static_cast<std::size_t>(i) * n, &v, static_cast<std::size_t>(n));
}

// The reference conversion of one element, bits in, bits out. A NaN becomes the canonical quiet
// NaN of its sign (compare with cast_matches).
inline uint64_t reference_cast(uint64_t in, DType from, DType to) {
  const Format f = format_of(from), g = format_of(to);
  const uint64_t f_mant = in & ((uint64_t{1} << f.mant_bits) - 1);
  const int f_exp = static_cast<int>((in >> f.mant_bits) & ((1u << f.exp_bits) - 1));
  const bool negative = (in >> (f.exp_bits + f.mant_bits)) & 1;
  const uint64_t g_sign = static_cast<uint64_t>(negative) << (g.exp_bits + g.mant_bits);
  const uint64_t g_inf = g_sign | (((uint64_t{1} << g.exp_bits) - 1) << g.mant_bits);
  if (f_exp == (1 << f.exp_bits) - 1)
    return f_mant != 0 ? g_inf | (uint64_t{1} << (g.mant_bits - 1)) : g_inf;
  // |value| exactly, as a double (every bf16, f32 and f64 is one).
  const double mag = f_exp == 0
                         ? std::ldexp(static_cast<double>(f_mant), 1 - f.bias() - f.mant_bits)
                         : std::ldexp(static_cast<double>(f_mant | (uint64_t{1} << f.mant_bits)),
                                      f_exp - f.bias() - f.mant_bits);
  if (mag == 0) return g_sign;
  // Round to g's precision: scale so that g's last mantissa bit (or its smallest denormal step)
  // is 1, round to an integer, nearest even (the process runs in FE_TONEAREST).
  int k = 0;
  std::frexp(mag, &k);  // mag in [2^(k-1), 2^k)
  const int quantum = std::max(k - 1 - g.mant_bits, 1 - g.bias() - g.mant_bits);
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(mag, -quantum)), quantum);
  if (rounded == 0) return g_sign;                             // underflow to +-0
  if (rounded >= std::ldexp(1.0, g.bias() + 1)) return g_inf;  // overflow
  std::frexp(rounded, &k);
  const int e = k - 1;   // rounded in [2^e, 2^(e+1))
  if (e < 1 - g.bias())  // denormal
    return g_sign | static_cast<uint64_t>(std::ldexp(rounded, g.bias() - 1 + g.mant_bits));
  const uint64_t mant =
      static_cast<uint64_t>(std::ldexp(rounded, g.mant_bits - e)) - (uint64_t{1} << g.mant_bits);
  return g_sign | (static_cast<uint64_t>(e + g.bias()) << g.mant_bits) | mant;
}

// got matches expected: the same bits, or both NaN of the same sign with got quiet.
inline bool cast_matches(uint64_t expected, uint64_t got, DType to) {
  const Format g = format_of(to);
  const uint64_t exp_mask = ((uint64_t{1} << g.exp_bits) - 1) << g.mant_bits;
  const uint64_t mant_mask = (uint64_t{1} << g.mant_bits) - 1;
  const uint64_t sign = uint64_t{1} << (g.exp_bits + g.mant_bits);
  const bool expected_nan = (expected & exp_mask) == exp_mask && (expected & mant_mask) != 0;
  if (!expected_nan) return expected == got;
  const bool got_quiet_nan = (got & exp_mask) == exp_mask && (got >> (g.mant_bits - 1) & 1) &&
                             (got & ~(sign | exp_mask | mant_mask)) == 0;
  return got_quiet_nan && (got & sign) == (expected & sign);
}

inline uint64_t cast_rng(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Bit patterns of the contract's special cases for inputs of dtype t.
inline std::vector<uint64_t> cast_specials(DType t) {
  if (t == DType::kBFloat16)
    return {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xff81, 0x7fbf, 0xffff,
            0x0001, 0x8001, 0x007f, 0x807f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80};
  if (t == DType::kFloat32)
    return {0x00000000, 0x80000000, 0x7f800000, 0xff800000,  // +-0, +-Inf
            0x7fc00000, 0xffc00000, 0x7fc00001, 0xffffffff,  // quiet NaNs
            0x7f800001, 0xff800001, 0x7fa00000, 0xff80ffff,  // signalling NaNs (payload below bit
            0x7f80ffff, 0x7fbfffff,                          // 16: truncation would give Inf)
            0x00000001, 0x80000001, 0x00008000, 0x00018000,  // denormals, denormal ties
            0x00008001, 0x007fffff, 0x807fffff, 0x00400000,
            0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff,  // FLT_MAX -> bf16 Inf; ties at the top
            0x7f7e8000, 0x3f808000, 0x3f818000, 0x3f80ffff,  // ties to even, just below a tie
            0x3f800000, 0xbf800000, 0x00800000, 0x80800000};
  // f64: FLT_MAX = (2 - 2^-23) * 2^127; its f32 ulp is 2^104, so FLT_MAX + 2^103 is the tie
  // between FLT_MAX (odd mantissa) and the overflow point 2^128: it rounds to Inf.
  return {0x0000000000000000, 0x8000000000000000, 0x7ff0000000000000, 0xfff0000000000000,
          0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0xfff0000000000001,
          0x7ff4000000000000, 0x7ff00000ffffffff,  // sNaN, payload only in bits f32 drops
          0x47efffffe0000000,                      // FLT_MAX
          0x47efffffefffffff,                      // just below FLT_MAX + 2^103: FLT_MAX
          0x47effffff0000000,                      // FLT_MAX + 2^103: tie, to Inf
          0x47effffff0000001, 0xc7effffff0000000,  // just above: Inf; -tie: -Inf
          0x47f0000000000000, 0x7fefffffffffffff,  // 2^128, DBL_MAX: Inf
          0x36a0000000000000, 0x3690000000000000,  // 2^-149 (f32 min denormal), 2^-150 (tie: 0)
          0x3690000000000001, 0x36a8000000000000,  // above the tie: 2^-149; 3*2^-150: 2^-148
          0x3810000000000000, 0x380fffffffffffff,  // 2^-126 (f32 min normal), just below
          0x0000000000000001, 0x8000000000000001, 0x000fffffffffffff,  // f64 denormals: +-0
          0x3ff0000010000000, 0x3ff0000030000000,  // 1 + 2^-24 (tie: 1), 1 + 3*2^-24 (tie: up)
          0x3ff0000000000000, 0xbff0000000000000};
}

// `count` inputs of dtype t (count*sizeof(t) bytes): the specials at both ends and, in between,
// specials at random positions, random bit patterns and (f32, f64) values near rounding ties.
inline std::vector<unsigned char> cast_input(DType t, int64_t count, uint64_t seed) {
  const std::vector<uint64_t> sp = cast_specials(t);
  const int64_t n_sp = static_cast<int64_t>(sp.size());
  std::vector<unsigned char> buf(static_cast<std::size_t>(count) * format_of(t).bytes());
  uint64_t s = seed;
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t r = cast_rng(s);
    uint64_t v;
    if (i < n_sp) {
      v = sp[static_cast<std::size_t>(i)];
    } else if (count - 1 - i < n_sp) {
      v = sp[static_cast<std::size_t>(count - 1 - i)];
    } else if (r % 8 == 0) {
      v = sp[static_cast<std::size_t>((r >> 3) % n_sp)];
    } else if (t == DType::kBFloat16 || r % 8 < 4) {
      v = r >> 7;  // random bits (store_bits keeps the low ones)
    } else if (t == DType::kFloat32) {
      // A bf16 value plus the low half at or next to the rounding tie.
      static const uint64_t low[] = {0x8000, 0x7fff, 0x8001, 0x0000, 0xffff};
      v = ((r >> 16) & 0xffff0000u) | low[(r >> 3) % 5];
    } else {
      // Doubles in and around f32's range (exponents 2^-160 .. 2^130); half of them exact f32
      // values plus half an f32 ulp (ties) or a double ulp either side of it.
      const uint64_t sign = (r >> 63) << 63;
      const uint64_t exp = static_cast<uint64_t>(1023 - 160 + static_cast<int>((r >> 8) % 291));
      uint64_t mant = (r >> 11) & ((uint64_t{1} << 52) - 1);
      if (r & 0x10) {
        mant = (mant & ~((uint64_t{1} << 29) - 1)) | (uint64_t{1} << 28);
        mant += ((r >> 5) & 3) - 1;  // tie - 1, tie, tie + 1 (or tie + 2)
      }
      v = sign | (exp << 52) | (mant & ((uint64_t{1} << 52) - 1));
    }
    store_bits(buf.data(), t, i, v);
  }
  return buf;
}

// The expected output bytes (count*sizeof(to)) of converting `input`.
inline std::vector<unsigned char> cast_expected(const std::vector<unsigned char>& input, DType from,
                                                DType to, int64_t count) {
  std::vector<unsigned char> out(static_cast<std::size_t>(count) * format_of(to).bytes());
  for (int64_t i = 0; i < count; ++i)
    store_bits(out.data(), to, i, reference_cast(load_bits(input.data(), from, i), from, to));
  return out;
}

// Compares the first count outputs of `got` with `expected`; returns the number of mismatches and
// describes the first few in *report.
template <class T>
int64_t cast_mismatches_typed(const unsigned char* got, const unsigned char* expected,
                              const unsigned char* input, DType from, DType to, int64_t count,
                              std::ostringstream& os) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i) {
    T e, g;
    std::memcpy(&e, expected + i * sizeof(T), sizeof(T));
    std::memcpy(&g, got + i * sizeof(T), sizeof(T));
    if (e == g || cast_matches(e, g, to)) continue;
    if (++bad <= 5)
      os << "  element " << i << " of " << count << ": input 0x" << std::hex
         << load_bits(input, from, i) << ", expected 0x" << uint64_t{e} << ", got 0x" << uint64_t{g}
         << std::dec << "\n";
  }
  return bad;
}

inline int64_t cast_mismatches(const unsigned char* got, const std::vector<unsigned char>& expected,
                               const std::vector<unsigned char>& input, DType from, DType to,
                               int64_t count, std::string* report) {
  std::ostringstream os;
  int64_t bad;
  if (to == DType::kBFloat16)
    bad = cast_mismatches_typed<uint16_t>(got, expected.data(), input.data(), from, to, count, os);
  else if (to == DType::kFloat32)
    bad = cast_mismatches_typed<uint32_t>(got, expected.data(), input.data(), from, to, count, os);
  else
    bad = cast_mismatches_typed<uint64_t>(got, expected.data(), input.data(), from, to, count, os);
  if (report != nullptr) *report = os.str();
  return bad;
}

}  // namespace fluxcpp::test
