// AllToAllSingle, the public class: a facade over src/ops/all_to_all_single.cpp.
#include "ops/all_to_all_single.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

FLUXCPP_PUBLIC_MADE_OP(AllToAllSingle, AllToAllSingleOptions, "all_to_all_single");
FLUXCPP_PUBLIC_INPUT_BUFFER(AllToAllSingle, "all_to_all_single")

void AllToAllSingle::forward(const void* input, const int64_t* input_splits, void* output,
                             const int64_t* output_splits) {
  ops::checked(impl_, "all_to_all_single").forward(input, input_splits, output, output_splits);
}

}  // namespace fluxcpp
