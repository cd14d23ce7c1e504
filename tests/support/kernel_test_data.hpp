// Test data of the single-process kernel tests (tests/kernels: gemm, cast, reduce): a
// deterministic generator, bit access to floats, and a typed buffer read and written through
// doubles. Header-only.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "fluxcpp/types.hpp"
#include "kernels/cast.hpp"

namespace fluxcpp::test {

// splitmix64: deterministic and identical on every platform, unlike std:: distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-52 - 1.0; }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }

 private:
  uint64_t state_;
};

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// A buffer of `count` elements of `dtype`, read and written through doubles. bf16 values are
// stored as their bit patterns; set() rounds to the element type.
class Buffer {
 public:
  Buffer(DType dtype, int64_t count) : dtype_(dtype), bytes_(count * dtype_size(dtype)) {}
  DType dtype() const { return dtype_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  double get(int64_t i) const {
    switch (dtype_) {
      case DType::kFloat32: return reinterpret_cast<const float*>(bytes_.data())[i];
      case DType::kFloat64: return reinterpret_cast<const double*>(bytes_.data())[i];
      case DType::kBFloat16:
        return kernels::bf16_to_f32(reinterpret_cast<const uint16_t*>(bytes_.data())[i]);
    }
    return 0;
  }
  void set(int64_t i, double v) {
    switch (dtype_) {
      case DType::kFloat32: reinterpret_cast<float*>(bytes_.data())[i] = float(v); break;
      case DType::kFloat64: reinterpret_cast<double*>(bytes_.data())[i] = v; break;
      case DType::kBFloat16:
        reinterpret_cast<uint16_t*>(bytes_.data())[i] = kernels::f32_to_bf16(float(v));
        break;
    }
  }
  // Deterministic values in [-1, 1], exactly representable in the element type (bf16 values are
  // generated as bf16, so the reference sees exactly the numbers the kernel sees).
  void fill_random(Rng& rng) {
    for (int64_t i = 0; i < size(); ++i) set(i, rng.uniform());
  }
  void fill_nan() {
    for (int64_t i = 0; i < size(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
  }
  int64_t size() const { return static_cast<int64_t>(bytes_.size() / dtype_size(dtype_)); }
  bool same_bits(const Buffer& o, int64_t i) const {
    const size_t e = dtype_size(dtype_);
    return std::memcmp(bytes_.data() + i * e, o.bytes_.data() + i * e, e) == 0;
  }

 private:
  DType dtype_;
  std::vector<unsigned char> bytes_;
};

}  // namespace fluxcpp::test
