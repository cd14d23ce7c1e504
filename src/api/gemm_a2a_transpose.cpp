// GemmA2aTranspose, the public class: a facade over src/ops/gemm_a2a_transpose.cpp.
#include "ops/gemm_a2a_transpose.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(GemmA2aTranspose, GemmA2aTransposeOptions, "gemm_a2a_transpose");
void GemmA2aTranspose::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                               const void* bias, void* output) {
  ops::checked(impl_, "gemm_a2a_transpose").forward(input, bs, seq, weight, bias, output);
}
void GemmA2aTranspose::forward_gemm_only(const void* input, int64_t bs, int64_t seq,
                                         const void* weight, const void* bias) {
  ops::checked(impl_, "gemm_a2a_transpose").forward_gemm_only(input, bs, seq, weight, bias);
}
void GemmA2aTranspose::forward_comm_only(int64_t bs, int64_t seq, void* output) {
  ops::checked(impl_, "gemm_a2a_transpose").forward_comm_only(bs, seq, output);
}

}  // namespace fluxcpp
