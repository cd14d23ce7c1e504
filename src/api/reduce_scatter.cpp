// The public class ReduceScatter: a thin facade over the op (src/ops/reduce_scatter.cpp).
#include "ops/reduce_scatter.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

ReduceScatter::ReduceScatter(const Context& ctx, const ReduceScatterOptions& options)
    : impl_(ops::make_op<detail::ReduceScatterImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(ReduceScatter, ReduceScatterOptions, "reduce_scatter");

void ReduceScatter::forward(const void* input, int64_t m, void* output) {
  ops::checked(impl_, "reduce_scatter").forward(input, m, output);
}

}  // namespace fluxcpp
