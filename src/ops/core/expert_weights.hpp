// The experts' weights of a grouped-GEMM op's call: expert l's [n, k] slab of the caller's
// stacked weight ([experts, n, k]), prepared for the GEMM engine the first time the call uses it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fluxcpp/types.hpp"
#include "kernels/gemm.hpp"

namespace fluxcpp::ops {

class ExpertWeights {
 public:
  ExpertWeights() = default;
  ExpertWeights(int64_t experts, DType dtype, int64_t n, int64_t k, bool transposed)
      : dtype_(dtype),
        n_(n),
        k_(k),
        transposed_(transposed),
        weights_(static_cast<std::size_t>(experts)),
        prepared_(static_cast<std::size_t>(experts), 0) {}

  // A new call: every expert is prepared again from the call's weight when it is first used.
  void begin(const void* stacked) {
    stacked_ = static_cast<const char*>(stacked);
    std::fill(prepared_.begin(), prepared_.end(), 0);
  }
  kernels::GemmWeight& of(int64_t l) {
    const auto i = static_cast<std::size_t>(l);
    if (!prepared_[i]) {
      const std::size_t slab = static_cast<std::size_t>(n_ * k_) * dtype_size(dtype_);
      weights_[i].prepare(dtype_, stacked_ + slab * i, n_, k_, transposed_);
      prepared_[i] = 1;
    }
    return weights_[i];
  }

 private:
  DType dtype_ = DType::kFloat32;
  int64_t n_ = 0, k_ = 0;
  bool transposed_ = false;
  const char* stacked_ = nullptr;
  std::vector<kernels::GemmWeight> weights_;
  std::vector<char> prepared_;
};

}  // namespace fluxcpp::ops
