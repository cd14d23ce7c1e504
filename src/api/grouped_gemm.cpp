// The public class GroupedGemm: a thin facade over the op (src/ops/grouped_gemm.cpp).
#include "ops/grouped_gemm.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

GroupedGemm::GroupedGemm(const Context& ctx, const GroupedGemmOptions& options)
    : impl_(std::make_unique<detail::GroupedGemmImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(GroupedGemm, GroupedGemmOptions, "grouped_gemm");

void GroupedGemm::forward(const void* input, const int64_t* splits, const void* weight,
                          const float* scale, void* output) {
  ops::checked(impl_, "grouped_gemm").forward(input, splits, weight, scale, output);
}

}  // namespace fluxcpp
