// GemmAr, the public class: a facade over src/ops/gemm_ar.cpp.
#include "ops/gemm_ar.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(GemmAr, GemmArOptions, "gemm_ar");

void GemmAr::forward(const void* input, int64_t m, const void* weight, const void* bias,
                     void* output) {
  ops::checked(impl_, "gemm_ar").forward(input, m, weight, bias, output);
}

void GemmAr::forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
                     void* output) {
  ops::checked(impl_, "gemm_ar").forward(input, m, weight.impl(), bias, output);
}

}  // namespace fluxcpp
