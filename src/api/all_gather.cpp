// The public class AllGather: a thin facade over the op (src/ops/all_gather.cpp).
#include "ops/all_gather.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

AllGather::AllGather(const Context& ctx, const AllGatherOptions& options)
    : impl_(ops::make_op<detail::AllGatherImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(AllGather, AllGatherOptions, "all_gather");
FLUXCPP_PUBLIC_INPUT_BUFFER(AllGather, "all_gather")

void AllGather::forward(const void* input, int64_t m, void* output) {
  ops::checked(impl_, "all_gather").forward(input, m, output);
}

}  // namespace fluxcpp
