// Element-wise reduction of N blocks in block order, for every element type and reduction a
// framework's collectives carry (the C ABI's fluxcpp_reduce_blocks; the torch backend's
// reductions that are not a floating sum run on it).
#pragma once

#include <cstdint>

namespace fluxcpp::kernels {

// The element types; the values are the C ABI's fluxcpp_dtype_t.
enum class Elem : int {
  kF32 = 0,
  kF64 = 1,
  kBF16 = 2,
  kF16 = 3,
  kI8 = 4,
  kU8 = 5,
  kI16 = 6,
  kI32 = 7,
  kI64 = 8,
  kBool = 9
};
// The reductions; the values are the C ABI's fluxcpp_reduce_op_t.
enum class ReduceOp : int {
  kSum = 0,
  kAvg = 1,
  kProduct = 2,
  kMin = 3,
  kMax = 4,
  kBand = 5,
  kBor = 6,
  kBxor = 7
};

// Whether `op` is defined on `e`: the bitwise ops on integers and bool, avg on floating types,
// the rest on every type. False for values outside the enums.
bool reduce_blocks_supported(Elem e, ReduceOp op);

// out[i] = blocks[0][i] (op) blocks[1][i] (op) ... (op) blocks[n-1][i], in block order whatever
// the vector width, so equal blocks give equal bits everywhere. Floating types accumulate in f32
// (f64 for f64) and are rounded once to the element type (bf16: nearest even, a NaN keeps its
// sign and gets the quiet bit; f16: the compiler's _Float16 conversion); avg divides the sum by
// `divisor` before rounding. min and max let a NaN win (torch's rule). Integer sums and products
// wrap; on bool, sum and max are "or", product and min "and", bxor "not equal", and any nonzero
// byte is true (the result is 0 or 1). The f32/bf16/f64 sums run on kernels::reduce_sum (AVX2
// when the CPU has it), the same bits. out may equal any block (not overlap it partially).
// Throws Error(kInvalidArgument) for an unsupported pair, nblocks < 1, count < 0, divisor < 1
// with avg, or a null pointer with count > 0.
void reduce_blocks(Elem e, ReduceOp op, const void* const* blocks, int nblocks, int64_t count,
                   int divisor, void* out);

}  // namespace fluxcpp::kernels
