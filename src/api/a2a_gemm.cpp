// A2aGemm, the public class: a facade over src/ops/a2a_gemm.cpp.
#include "ops/a2a_gemm.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(A2aGemm, A2aGemmOptions, "a2a_gemm");
FLUXCPP_PUBLIC_INPUT_BUFFER(A2aGemm, "a2a_gemm")

void A2aGemm::forward(const void* input, int64_t m, const void* weight, const void* bias,
                      void* output, void* a2a_output) {
  ops::checked(impl_, "a2a_gemm").forward(input, m, weight, bias, output, a2a_output);
}
void A2aGemm::forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                                void* output) {
  ops::checked(impl_, "a2a_gemm").forward_gemm_only(input, m, weight, bias, output);
}
void A2aGemm::forward_comm_only(const void* input, int64_t m, void* a2a_output) {
  ops::checked(impl_, "a2a_gemm").forward_comm_only(input, m, a2a_output);
}

}  // namespace fluxcpp
