// fluxcpp/inplace_cast.hpp: converting a buffer between dtypes in place (FLUX InplaceCast).
#pragma once

#include <cstdint>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

// Local (not collective), blocking. Converts `count` elements of dtype `from` starting at `data`
// into elements of dtype `to` over the same memory: element i of the result (at data +
// i*sizeof(to)) = convert(element i of the input (at data + i*sizeof(from))).
// Pairs: f32 -> bf16 and f64 -> f32 (narrowing: round to nearest even, overflow to +-Inf,
// denormals exact; afterwards the bytes [count*sizeof(to), count*sizeof(from)) are unspecified);
// bf16 -> f32 and f32 -> f64 (widening, exact; the buffer must hold count*sizeof(to) bytes).
// Every NaN comes out as a quiet NaN with its sign; +-Inf and +-0 stay. Independent of the
// caller's floating-point rounding mode and FTZ/DAZ bits. Any alignment; count == 0 is a no-op.
// ctx null: the calling thread does the work. Otherwise the context's compute threads share it
// with the calling thread (the context must not be in use by another call meanwhile, as for
// every op). Errors: another pair, count < 0, count*sizeof(to) or count*sizeof(from) above
// INT64_MAX, or data null with count > 0: Error(kInvalidArgument) naming the values, buffer
// untouched; a closed context: Error(kInvalidUsage).
FLUXCPP_API void inplace_cast(const Context* ctx, void* data, int64_t count, DType from, DType to);

}  // namespace fluxcpp
