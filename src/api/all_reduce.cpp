// AllReduce, the public class: a facade over src/ops/all_reduce.cpp.
#include "ops/all_reduce.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(AllReduce, AllReduceOptions, "all_reduce");
FLUXCPP_PUBLIC_INPUT_BUFFER(AllReduce, "all_reduce")

void AllReduce::forward(const void* input, int64_t count, void* output) {
  ops::checked(impl_, "all_reduce").forward(input, count, output);
}

}  // namespace fluxcpp
