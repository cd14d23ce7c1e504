// The public class GemmAr: a thin facade over the op (src/ops/gemm_ar.cpp).
#include "ops/gemm_ar.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

GemmAr::GemmAr(const Context& ctx, const GemmArOptions& options)
    : impl_(ops::make_op<detail::GemmArImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(GemmAr, GemmArOptions, "gemm_ar");

void GemmAr::forward(const void* input, int64_t m, const void* weight, const void* bias,
                     void* output) {
  ops::checked(impl_, "gemm_ar").forward(input, m, weight, bias, output);
}

void GemmAr::forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
                     void* output) {
  ops::checked(impl_, "gemm_ar").forward(input, m, weight.impl(), bias, output);
}

}  // namespace fluxcpp
