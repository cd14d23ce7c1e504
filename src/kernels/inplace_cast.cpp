#include "kernels/inplace_cast.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cast.hpp"
#include "kernels/inplace_cast_x86.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace fluxcpp::kernels {
namespace {

// The f64 <-> f32 conversions run on hardware that reads the rounding mode and the
// flush-to-zero / denormals-are-zero bits from MXCSR, which the caller may have changed
// (fesetround, -ffast-math startup code). The contract fixes nearest even and exact denormals,
// so a range runs under the default MXCSR (also: every exception masked) and restores the
// caller's afterwards, status flags included.
class DefaultFpEnvironment {
 public:
#if defined(__SSE2__)
  DefaultFpEnvironment() : saved_(_mm_getcsr()) {
    _mm_setcsr(kDefaultMxcsr);
  }
  ~DefaultFpEnvironment() {
    _mm_setcsr(saved_);
  }

 private:
  static constexpr unsigned kDefaultMxcsr = 0x1f80;
  unsigned saved_;
#endif
};

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// Scalar walks (the whole range for CastIsa::kScalar, the edges the vector bodies leave
// otherwise). Narrowing forward over [b, e), widening backward over [b, e).
void f32_to_bf16_scalar(unsigned char* p, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) store(p + 2 * i, f32_to_bf16(load<float>(p + 4 * i)));
}

void f64_to_f32_scalar(unsigned char* p, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) store(p + 4 * i, static_cast<float>(load<double>(p + 8 * i)));
}

void bf16_to_f32_scalar(unsigned char* p, int64_t b, int64_t e) {
  for (int64_t i = e - 1; i >= b; --i) {
    uint16_t v = load<uint16_t>(p + 2 * i);
    if ((v & 0x7fffu) > 0x7f80u) v |= 0x0040u;  // quiet a signalling NaN, like f32 -> f64
    store(p + 4 * i, bf16_to_f32(v));
  }
}

void f32_to_f64_scalar(unsigned char* p, int64_t b, int64_t e) {
  for (int64_t i = e - 1; i >= b; --i)
    store(p + 8 * i, static_cast<double>(load<float>(p + 4 * i)));
}

const x86::Bodies* bodies_for(CastIsa isa) {
  switch (isa) {
    case CastIsa::kScalar: return nullptr;
    case CastIsa::kSse2: return x86::sse2_bodies();
    case CastIsa::kAvx2: return x86::avx2_bodies();
    case CastIsa::kAuto: break;
  }
  static const x86::Bodies* best = x86::avx2_bodies() ? x86::avx2_bodies() : x86::sse2_bodies();
  return best;
}

}  // namespace

bool inplace_cast_supported(DType from, DType to) {
  return (from == DType::kFloat32 && to == DType::kBFloat16) ||
         (from == DType::kFloat64 && to == DType::kFloat32) ||
         (from == DType::kBFloat16 && to == DType::kFloat32) ||
         (from == DType::kFloat32 && to == DType::kFloat64);
}

bool cast_isa_available(CastIsa isa) {
  return isa == CastIsa::kAuto || isa == CastIsa::kScalar || bodies_for(isa) != nullptr;
}

void inplace_cast_range(void* data, int64_t begin, int64_t end, DType from, DType to, CastIsa isa) {
  if (begin >= end) return;
  auto* p = static_cast<unsigned char*>(data);
  const x86::Bodies* v = bodies_for(isa);
  // A vector body converts a contiguous part of the range in the walk's direction and the scalar
  // loop continues the same walk, so the order over the whole range stays strictly forward
  // (narrowing) or strictly backward (widening).
  if (from == DType::kFloat32 && to == DType::kBFloat16) {
    f32_to_bf16_scalar(p, v ? v->f32_to_bf16(p, begin, end) : begin, end);
  } else if (from == DType::kBFloat16) {
    bf16_to_f32_scalar(p, begin, v ? v->bf16_to_f32(p, begin, end) : end);
  } else if (from == DType::kFloat64) {
    DefaultFpEnvironment env;
    f64_to_f32_scalar(p, v ? v->f64_to_f32(p, begin, end) : begin, end);
  } else {
    DefaultFpEnvironment env;
    f32_to_f64_scalar(p, begin, v ? v->f32_to_f64(p, begin, end) : end);
  }
}

// Why the steps are safe. Measure bytes in units of the smaller element size and let r = 2 be the
// size ratio (true of every supported pair).
// Narrowing: input i occupies [r*i, r*i + r), output i occupies [i, i + 1). The outputs of
// elements [L, H) cover [L, H), i.e. inputs [L/r, H/r) rounded outward. If H <= r*L, all of
// those are below L: inputs of earlier steps, already read. So [L, r*L) can be split over
// threads freely: no piece writes a byte any piece of this or a later step still has to read. The
// first step [0, A) writes over its own inputs (outputs [0, A) cover inputs [0, A/r)); one forward
// walk reads each before overwriting it.
// Widening: input i occupies [i, i + 1), output i occupies [r*i, r*i + r), over inputs
// [r*i, r*i + r). The outputs of [L, H) cover inputs [r*L, r*H); with L >= H/r those are all at
// or above H: inputs of earlier steps (the walk goes from the top down). The last step [0, A)
// covers inputs [0, r*A), its own and earlier ones; one backward walk reads each first.
std::vector<CastStep> inplace_cast_steps(int64_t count, DType from, DType to, int64_t serial) {
  std::vector<CastStep> steps;
  if (count <= 0) return steps;
  const int64_t a = std::min(count, std::max<int64_t>(serial, 1));
  const int64_t sf = static_cast<int64_t>(dtype_size(from));
  const int64_t st = static_cast<int64_t>(dtype_size(to));
  if (sf > st) {
    steps.push_back({0, a, false});
    for (int64_t lo = a; lo < count;) {
      const int64_t hi = std::min(count, lo * sf / st);  // hi*st <= lo*sf: outputs below lo
      steps.push_back({lo, hi, true});
      lo = hi;
    }
  } else {
    for (int64_t hi = count; hi > a;) {
      const int64_t lo =
          std::max(a, (hi * sf + st - 1) / st);  // lo*st >= hi*sf: outputs at or above hi
      steps.push_back({lo, hi, true});
      hi = lo;
    }
    steps.push_back({0, a, false});
  }
  return steps;
}

}  // namespace fluxcpp::kernels
