// The backend's element types and reductions: names, sizes, which reductions torch allows on
// which type; the reductions themselves are the library's (fluxcpp_reduce_blocks).
#include "scalar.hpp"

#include "capi_call.hpp"

namespace fluxcpp::backend {

static_assert(static_cast<int>(Scalar::kF32) == FLUXCPP_FLOAT32 &&
                  static_cast<int>(Scalar::kF64) == FLUXCPP_FLOAT64 &&
                  static_cast<int>(Scalar::kBF16) == FLUXCPP_BFLOAT16 &&
                  static_cast<int>(Scalar::kF16) == FLUXCPP_FLOAT16 &&
                  static_cast<int>(Scalar::kI8) == FLUXCPP_INT8 &&
                  static_cast<int>(Scalar::kU8) == FLUXCPP_UINT8 &&
                  static_cast<int>(Scalar::kI16) == FLUXCPP_INT16 &&
                  static_cast<int>(Scalar::kI32) == FLUXCPP_INT32 &&
                  static_cast<int>(Scalar::kI64) == FLUXCPP_INT64 &&
                  static_cast<int>(Scalar::kBool) == FLUXCPP_BOOL,
              "Scalar follows fluxcpp_dtype_t");
static_assert(static_cast<int>(Reduce::kSum) == FLUXCPP_REDUCE_SUM &&
                  static_cast<int>(Reduce::kAvg) == FLUXCPP_REDUCE_AVG &&
                  static_cast<int>(Reduce::kProduct) == FLUXCPP_REDUCE_PRODUCT &&
                  static_cast<int>(Reduce::kMin) == FLUXCPP_REDUCE_MIN &&
                  static_cast<int>(Reduce::kMax) == FLUXCPP_REDUCE_MAX &&
                  static_cast<int>(Reduce::kBand) == FLUXCPP_REDUCE_BAND &&
                  static_cast<int>(Reduce::kBor) == FLUXCPP_REDUCE_BOR &&
                  static_cast<int>(Reduce::kBxor) == FLUXCPP_REDUCE_BXOR,
              "Reduce follows fluxcpp_reduce_op_t");

std::size_t scalar_size(Scalar s) {
  switch (s) {
    case Scalar::kF64: case Scalar::kI64: return 8;
    case Scalar::kF32: case Scalar::kI32: return 4;
    case Scalar::kBF16: case Scalar::kF16: case Scalar::kI16: return 2;
    case Scalar::kI8: case Scalar::kU8: case Scalar::kBool: return 1;
  }
  return 0;
}

const char* scalar_name(Scalar s) {
  switch (s) {
    case Scalar::kF32: return "float32";
    case Scalar::kF64: return "float64";
    case Scalar::kBF16: return "bfloat16";
    case Scalar::kF16: return "float16";
    case Scalar::kI8: return "int8";
    case Scalar::kU8: return "uint8";
    case Scalar::kI16: return "int16";
    case Scalar::kI32: return "int32";
    case Scalar::kI64: return "int64";
    case Scalar::kBool: return "bool";
  }
  return "invalid";
}

const char* reduce_name(Reduce r) {
  switch (r) {
    case Reduce::kSum: return "SUM";
    case Reduce::kAvg: return "AVG";
    case Reduce::kProduct: return "PRODUCT";
    case Reduce::kMin: return "MIN";
    case Reduce::kMax: return "MAX";
    case Reduce::kBand: return "BAND";
    case Reduce::kBor: return "BOR";
    case Reduce::kBxor: return "BXOR";
  }
  return "invalid";
}

bool is_floating(Scalar s) {
  return s == Scalar::kF32 || s == Scalar::kF64 || s == Scalar::kBF16 || s == Scalar::kF16;
}

bool reduce_supported(Scalar s, Reduce r) {
  if (r == Reduce::kBand || r == Reduce::kBor || r == Reduce::kBxor) return !is_floating(s);
  if (r == Reduce::kAvg) return is_floating(s);
  return true;
}

void reduce_blocks(Scalar s, Reduce r, const void* const* blocks, int nblocks, int64_t count,
                   void* out, int divisor) {
  // The enums follow the C ABI's order (scalar.hpp); the casts name them.
  check(fluxcpp_reduce_blocks(static_cast<fluxcpp_dtype_t>(s), static_cast<fluxcpp_reduce_op_t>(r),
                              blocks, nblocks, count, divisor, out),
        "reduce");
}

}  // namespace fluxcpp::backend
