// The element types and reductions the torch.distributed backend carries, independent of torch:
// the engine under backend/c10d works on raw buffers, so it builds and tests without libtorch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fluxcpp::backend {

// The values are the C ABI's fluxcpp_dtype_t and fluxcpp_reduce_op_t (scalar.cpp checks).
enum class Scalar { kF32, kF64, kBF16, kF16, kI8, kU8, kI16, kI32, kI64, kBool };
enum class Reduce { kSum, kAvg, kProduct, kMin, kMax, kBand, kBor, kBxor };

std::size_t scalar_size(Scalar s);
const char* scalar_name(Scalar s);
const char* reduce_name(Reduce r);
bool is_floating(Scalar s);
// Whether `r` is defined on `s` (bitwise ops: integers and bool; avg: floating types).
bool reduce_supported(Scalar s, Reduce r);

// out[i] = blocks[0][i] (op) blocks[1][i] (op) ... in block order, the same bits on every rank
// that passes the same blocks: the library's fluxcpp_reduce_blocks (its contract: floating types
// accumulate in f32, f64 for f64, and are rounded once, avg dividing by `divisor` first; integer
// sums and products wrap; on bool, sum and max are "or", product and min "and"). out may alias
// blocks[0]. nblocks >= 1. Throws Failure when the library refuses.
void reduce_blocks(Scalar s, Reduce r, const void* const* blocks, int nblocks, int64_t count,
                   void* out, int divisor);

}  // namespace fluxcpp::backend
