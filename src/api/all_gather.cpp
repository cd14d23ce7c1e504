// AllGather, the public class: a facade over src/ops/all_gather.cpp.
#include "ops/all_gather.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(AllGather, AllGatherOptions, "all_gather");
FLUXCPP_PUBLIC_INPUT_BUFFER(AllGather, "all_gather")

void AllGather::forward(const void* input, int64_t m, void* output) {
  ops::checked(impl_, "all_gather").forward(input, m, output);
}

}  // namespace fluxcpp
