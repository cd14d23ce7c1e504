// The public class AllReduce: a thin facade over the op (src/ops/all_reduce.cpp).
#include "ops/all_reduce.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

AllReduce::AllReduce(const Context& ctx, const AllReduceOptions& options)
    : impl_(ops::make_op<detail::AllReduceImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(AllReduce, AllReduceOptions, "all_reduce");
FLUXCPP_PUBLIC_INPUT_BUFFER(AllReduce, "all_reduce")

void AllReduce::forward(const void* input, int64_t count, void* output) {
  ops::checked(impl_, "all_reduce").forward(input, count, output);
}

}  // namespace fluxcpp
