// A2aTransposeGemm, the public class: a facade over src/ops/a2a_transpose_gemm.cpp.
#include "ops/a2a_transpose_gemm.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(A2aTransposeGemm, A2aTransposeGemmOptions, "a2a_transpose_gemm");
void A2aTransposeGemm::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                               const void* bias, void* output, void* a2a_output) {
  ops::checked(impl_, "a2a_transpose_gemm")
      .forward(input, bs, seq, weight, bias, output, a2a_output);
}
void A2aTransposeGemm::forward_comm_only(const void* input, int64_t bs, int64_t seq,
                                         void* a2a_output) {
  ops::checked(impl_, "a2a_transpose_gemm").forward_comm_only(input, bs, seq, a2a_output);
}
void A2aTransposeGemm::forward_gemm_only(int64_t bs, int64_t seq, const void* weight,
                                         const void* bias, void* output) {
  ops::checked(impl_, "a2a_transpose_gemm").forward_gemm_only(bs, seq, weight, bias, output);
}

}  // namespace fluxcpp
