// MoeCombine, the public class: a facade over src/ops/moe_combine.cpp.
#include "ops/moe_combine.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(MoeCombine, MoeCombineOptions, "moe_combine");

void MoeCombine::forward(const MoeCombineInput& input, void* output) {
  ops::checked(impl_, "moe_combine").forward(input, output);
}

}  // namespace fluxcpp
