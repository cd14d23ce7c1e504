// AgGemm, the public class: a facade over src/ops/ag_gemm.cpp.
#include "ops/ag_gemm.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(AgGemm, AgGemmOptions, "ag_gemm");
FLUXCPP_PUBLIC_INPUT_BUFFER(AgGemm, "ag_gemm")

void AgGemm::forward(const void* input, int64_t m, const void* weight, const void* bias,
                     void* output, void* gathered_input) {
  ops::checked(impl_, "ag_gemm").forward(input, m, weight, bias, output, gathered_input);
}
void AgGemm::forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
                     void* output, void* gathered_input) {
  ops::checked(impl_, "ag_gemm").forward(input, m, weight.impl(), bias, output, gathered_input);
}
void AgGemm::forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                               void* output) {
  ops::checked(impl_, "ag_gemm").forward_gemm_only(input, m, weight, bias, output);
}
void AgGemm::forward_comm_only(const void* input, int64_t m, void* gathered_input) {
  ops::checked(impl_, "ag_gemm").forward_comm_only(input, m, gathered_input);
}

}  // namespace fluxcpp
