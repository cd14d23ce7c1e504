// The public class MoeCombine: a thin facade over the op (src/ops/moe_combine.cpp).
#include "ops/moe_combine.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

MoeCombine::MoeCombine(const Context& ctx, const MoeCombineOptions& options)
    : impl_(ops::make_op<detail::MoeCombineImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(MoeCombine, MoeCombineOptions, "moe_combine");

void MoeCombine::forward(const MoeCombineInput& input, void* output) {
  ops::checked(impl_, "moe_combine").forward(input, output);
}

}  // namespace fluxcpp
