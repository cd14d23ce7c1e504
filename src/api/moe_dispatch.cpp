// The public class MoeDispatch: a thin facade over the op (src/ops/moe_dispatch.cpp).
#include "ops/moe_dispatch.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

MoeDispatch::MoeDispatch(const Context& ctx, const MoeDispatchOptions& options)
    : impl_(ops::make_op<detail::MoeDispatchImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(MoeDispatch, MoeDispatchOptions, "moe_dispatch");

int64_t MoeDispatch::forward(const MoeDispatchInput& input, const MoeDispatchOutput& output) {
  return ops::checked(impl_, "moe_dispatch").forward(input, output);
}

}  // namespace fluxcpp
