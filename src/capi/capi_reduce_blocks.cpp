// The C ABI of the element-wise helpers: fluxcpp_reduce_blocks and fluxcpp_convert, thin
// wrappers over kernels/reduce_blocks and kernels/cast (no context).
#include <cstring>
#include <string>

#include "capi/capi_common.hpp"
#include "fluxcpp/error.hpp"
#include "kernels/cast.hpp"
#include "kernels/reduce_blocks.hpp"

namespace {

// A C caller may pass any int: read the enum's bytes (see capi::to_dtype).
template <typename E>
int raw_enum(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are int-sized");
  int raw;
  std::memcpy(&raw, &e, sizeof raw);
  return raw;
}

}  // namespace

extern "C" {

fluxcpp_status_t fluxcpp_reduce_blocks(fluxcpp_dtype_t dtype, fluxcpp_reduce_op_t op,
                                       const void* const* blocks, int nblocks, int64_t count,
                                       int divisor, void* out) {
  return fluxcpp::capi::guarded([&] {
    fluxcpp::kernels::reduce_blocks(static_cast<fluxcpp::kernels::Elem>(raw_enum(dtype)),
                                    static_cast<fluxcpp::kernels::ReduceOp>(raw_enum(op)), blocks,
                                    nblocks, count, divisor, out);
  });
}

fluxcpp_status_t fluxcpp_convert(const void* src, fluxcpp_dtype_t from, void* dst,
                                 fluxcpp_dtype_t to, int64_t count) {
  return fluxcpp::capi::guarded([&] {
    const int f = raw_enum(from), t = raw_enum(to);
    const bool widen = t == FLUXCPP_FLOAT32 && (f == FLUXCPP_BFLOAT16 || f == FLUXCPP_FLOAT16);
    const bool narrow = f == FLUXCPP_FLOAT32 && (t == FLUXCPP_BFLOAT16 || t == FLUXCPP_FLOAT16);
    if (!widen && !narrow)
      throw fluxcpp::Error(fluxcpp::Errc::kInvalidArgument,
                           "convert: dtype " + std::to_string(f) + " -> " + std::to_string(t) +
                               " is not a pair (bf16/f16 -> f32, f32 -> bf16/f16)");
    if (count < 0)
      throw fluxcpp::Error(fluxcpp::Errc::kInvalidArgument,
                           "convert: negative count " + std::to_string(count));
    if (count == 0) return;
    if (src == nullptr || dst == nullptr)
      throw fluxcpp::Error(
          fluxcpp::Errc::kInvalidArgument,
          std::string("convert: ") + (src == nullptr ? "src" : "dst") + " is null");
    namespace k = fluxcpp::kernels;
    if (f == FLUXCPP_BFLOAT16)
      k::bf16_to_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), count);
    else if (f == FLUXCPP_FLOAT16)
      k::f16_to_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), count);
    else if (t == FLUXCPP_BFLOAT16)
      k::f32_to_bf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), count);
    else
      k::f32_to_f16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), count);
  });
}

}  // extern "C"
