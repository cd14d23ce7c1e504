// MoeDispatch, the public class: a facade over src/ops/moe_dispatch.cpp.
#include "ops/moe_dispatch.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(MoeDispatch, MoeDispatchOptions, "moe_dispatch");

int64_t MoeDispatch::forward(const MoeDispatchInput& input, const MoeDispatchOutput& output) {
  return ops::checked(impl_, "moe_dispatch").forward(input, output);
}

}  // namespace fluxcpp
