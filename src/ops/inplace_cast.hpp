// InplaceCast: kernels::inplace_cast_range over the plan of kernels::inplace_cast_plan, its chains
// shared between the calling thread and the context's compute workers.
#pragma once

#include <cstdint>

#include "comm/parts.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp::ops {

// The contract of fluxcpp::inplace_cast (fluxcpp/inplace_cast.hpp); c null: the calling thread
// alone. Shared by the C++ API and the C ABI, so both check and report alike.
void inplace_cast(const comm::Parts* c, void* data, int64_t count, DType from, DType to);

}  // namespace fluxcpp::ops
