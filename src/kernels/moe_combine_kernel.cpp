// Compiled with -ffp-contract=off (CMakeLists.txt): "the product rounded to the accumulator type,
// then added" must not become a fused multiply-add, whatever -march says.
#include "kernels/moe_combine_kernel.hpp"

#include <cstring>
#include <vector>

#include "kernels/cast.hpp"

namespace fluxcpp::kernels {

namespace {

template <class In>
inline void load(const In* src, int64_t h, float* dst) {
  if constexpr (sizeof(In) == 2) {
    for (int64_t i = 0; i < h; ++i) dst[i] = bf16_to_f32(src[i]);
  } else {
    std::memcpy(dst, src, static_cast<std::size_t>(h) * sizeof(float));
  }
}

// Acc: float or double; In: uint16_t (bf16), float or double; Out likewise.
template <class Acc, class In, class Out>
void combine(const void* const* rows, const float* weights, int64_t t0, int64_t t1, int64_t K,
             int64_t hidden, void* output) {
  std::vector<Acc> acc(static_cast<std::size_t>(hidden));
  std::vector<float> wide;
  if constexpr (sizeof(In) == 2) wide.resize(static_cast<std::size_t>(hidden));
  for (int64_t t = t0; t < t1; ++t) {
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (int64_t k = 0; k < K; ++k) {
      const void* row = rows[t * K + k];
      if (row == nullptr) continue;
      const Acc* y;
      if constexpr (sizeof(In) == 2) {
        load(static_cast<const uint16_t*>(row), hidden, wide.data());
        y = wide.data();
      } else {
        y = static_cast<const Acc*>(row);
      }
      Acc* a = acc.data();
      if (weights == nullptr) {
        for (int64_t i = 0; i < hidden; ++i) a[i] = a[i] + y[i];
      } else {
        const Acc w = static_cast<Acc>(weights[t * K + k]);
        for (int64_t i = 0; i < hidden; ++i) a[i] = a[i] + w * y[i];
      }
    }
    Out* o = static_cast<Out*>(output) + t * hidden;
    if constexpr (sizeof(Out) == 2) {
      for (int64_t i = 0; i < hidden; ++i) o[i] = f32_to_bf16(acc[static_cast<std::size_t>(i)]);
    } else {
      for (int64_t i = 0; i < hidden; ++i)
        o[i] = static_cast<Out>(acc[static_cast<std::size_t>(i)]);
    }
  }
}

}  // namespace

void moe_combine_rows(const void* const* rows, const float* weights, int64_t t0, int64_t t1,
                      int64_t topk, int64_t hidden, DType in_dtype, DType out_dtype, void* output) {
  if (in_dtype == DType::kFloat64)
    combine<double, double, double>(rows, weights, t0, t1, topk, hidden, output);
  else if (in_dtype == DType::kFloat32)
    combine<float, float, float>(rows, weights, t0, t1, topk, hidden, output);
  else if (out_dtype == DType::kBFloat16)
    combine<float, uint16_t, uint16_t>(rows, weights, t0, t1, topk, hidden, output);
  else
    combine<float, uint16_t, float>(rows, weights, t0, t1, topk, hidden, output);
}

namespace {
template <typename T>
void add_weighted(T* part, const T* y, int64_t n, const float* w) {
  if (w == nullptr) {
    for (int64_t i = 0; i < n; ++i) part[i] += y[i];
    return;
  }
  const T wt = static_cast<T>(*w);
  for (int64_t i = 0; i < n; ++i) {
    const T p = wt * y[i];
    part[i] += p;
  }
}
}  // namespace

void add_weighted_row(DType acc, void* part, const void* y, int64_t n, const float* w) {
  if (acc == DType::kFloat64)
    add_weighted(static_cast<double*>(part), static_cast<const double*>(y), n, w);
  else
    add_weighted(static_cast<float*>(part), static_cast<const float*>(y), n, w);
}

}  // namespace fluxcpp::kernels
