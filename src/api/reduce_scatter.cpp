// ReduceScatter, the public class: a facade over src/ops/reduce_scatter.cpp.
#include "ops/reduce_scatter.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(ReduceScatter, ReduceScatterOptions, "reduce_scatter");

void ReduceScatter::forward(const void* input, int64_t m, void* output) {
  ops::checked(impl_, "reduce_scatter").forward(input, m, output);
}

}  // namespace fluxcpp
