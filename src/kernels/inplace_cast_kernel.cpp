#include "kernels/inplace_cast_kernel.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cast.hpp"
#include "kernels/inplace_cast_x86.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace fluxcpp::kernels {
namespace {

// The f64 <-> f32 conversions read the rounding mode and the flush-to-zero / denormals-are-zero
// bits from MXCSR, which the caller may have changed (fesetround, -ffast-math startup code), and
// the NaN tests compare lanes as floats, which traps on a signalling NaN if the caller unmasked
// FE_INVALID. The contract fixes nearest even and exact denormals, so a range runs under the
// default MXCSR (every exception masked) and restores the caller's afterwards, status flags
// included.
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
  DefaultFpEnvironment env;
  if (from == DType::kFloat32 && to == DType::kBFloat16)
    f32_to_bf16_scalar(p, v ? v->f32_to_bf16(p, begin, end) : begin, end);
  else if (from == DType::kBFloat16)
    bf16_to_f32_scalar(p, begin, v ? v->bf16_to_f32(p, begin, end) : end);
  else if (from == DType::kFloat64)
    f64_to_f32_scalar(p, v ? v->f64_to_f32(p, begin, end) : begin, end);
  else
    f32_to_f64_scalar(p, begin, v ? v->f32_to_f64(p, begin, end) : end);
}

// Why the plan is safe. Every supported pair has size ratio 2; measure bytes in units of the
// smaller element. Let chain t's piece of step j be P_j = [c_t * 2^j, c_(t+1) * 2^j) (clipped to
// count), where a = c_0 < c_1 < ... < c_T = 2a cut [a, 2a).
// Narrowing: input i occupies [2i, 2i+2), output i occupies [i, i+1). The outputs of P_j cover
// inputs [c_t * 2^(j-1), c_(t+1) * 2^(j-1)) = P_(j-1), the same chain's previous piece, which
// that thread has finished reading; for j = 0 they cover [a/2, a), inside `serial`, which ran
// before any chain. So no thread ever writes a byte that another thread (or a later piece) still
// has to read, whatever the interleaving. `serial` = [0, a) overwrites only its own inputs
// (outputs [0, a) cover inputs [0, a/2)); its forward walk reads each first.
// Widening: input i occupies [i, i+1), output i occupies [2i, 2i+2). The outputs of P_j cover
// inputs [c_t * 2^(j+1), c_(t+1) * 2^(j+1)) = P_(j+1), the same chain's previous piece (chains
// walk j downward), or lie past count for the top step. `serial` = [0, a) runs after every chain
// has finished; its outputs cover inputs [0, 2a), its own and finished ones; its backward walk
// reads each of its own first.
CastPlan inplace_cast_plan(int64_t count, DType from, DType to, int threads, int doublings) {
  CastPlan plan;
  plan.serial_first = dtype_size(from) > dtype_size(to);
  const int64_t a = (count + (int64_t{1} << doublings) - 1) >> doublings;
  plan.serial = {0, std::min(count, a)};
  if (a >= count) return plan;
  plan.chains.resize(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    const int64_t c0 = a + a * t / threads, c1 = a + a * (t + 1) / threads;
    auto& chain = plan.chains[static_cast<std::size_t>(t)];
    for (int step = 0; step < doublings; ++step) {
      const int j = plan.serial_first ? step : doublings - 1 - step;
      const CastRange r{std::min(count, c0 << j), std::min(count, c1 << j)};
      if (r.begin < r.end) chain.push_back(r);
    }
  }
  return plan;
}

}  // namespace fluxcpp::kernels
