// The C ABI of inplace_cast: a thin wrapper over ops::inplace_cast (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/inplace_cast.hpp"

using namespace fluxcpp::capi;

extern "C" {

fluxcpp_status_t fluxcpp_inplace_cast(fluxcpp_context_t ctx, void* data, int64_t count,
                                      fluxcpp_dtype_t from, fluxcpp_dtype_t to) {
  return guarded([&] {
    fluxcpp::ops::inplace_cast(ctx == nullptr ? nullptr : &ctx->impl->parts(), data, count,
                               to_dtype(from), to_dtype(to));
  });
}

}  // extern "C"
