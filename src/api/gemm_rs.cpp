// GemmRs, the public class: a facade over src/ops/gemm_rs.cpp.
#include "ops/gemm_rs.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(GemmRs, GemmRsOptions, "gemm_rs");

void GemmRs::forward(const void* input, int64_t m, const void* weight, const void* bias,
                     void* output) {
  ops::checked(impl_, "gemm_rs").forward(input, m, weight, bias, output);
}
void GemmRs::forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
                     void* output) {
  ops::checked(impl_, "gemm_rs").forward(input, m, weight.impl(), bias, output);
}
void GemmRs::forward_gemm_only(const void* input, int64_t m, const void* weight) {
  ops::checked(impl_, "gemm_rs").forward_gemm_only(input, m, weight);
}
void GemmRs::forward_comm_only(int64_t m, const void* bias, void* output) {
  ops::checked(impl_, "gemm_rs").forward_comm_only(m, bias, output);
}

}  // namespace fluxcpp
