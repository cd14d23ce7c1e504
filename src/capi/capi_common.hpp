// Shared pieces of the C ABI: the context handle, exception-to-status mapping, argument helpers.
// Every src/capi file includes this; each op family defines its own handles.
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "comm/context_impl.hpp"
#include "fluxcpp/fluxcpp.h"
#include "fluxcpp/fluxcpp.hpp"

struct fluxcpp_context_s {
  std::shared_ptr<fluxcpp::detail::ContextImpl> impl;
};

namespace fluxcpp::capi {

// The message of the last failure on this thread (fluxcpp_last_error).
std::string& last_error();

inline fluxcpp_status_t fail(fluxcpp_status_t s, std::string msg) {
  last_error() = std::move(msg);
  return s;
}

template <typename F>
fluxcpp_status_t guarded(F&& f) noexcept {
  try {
    f();
    return FLUXCPP_SUCCESS;
  } catch (const fluxcpp::Error& e) {
    return fail(static_cast<fluxcpp_status_t>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(FLUXCPP_ERROR_SYSTEM, "out of memory");
  } catch (const std::exception& e) {
    return fail(FLUXCPP_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(FLUXCPP_ERROR_INTERNAL, "unknown exception");
  }
}

inline fluxcpp_status_t null_arg(const char* fn, const char* arg) {
  return fail(FLUXCPP_ERROR_INVALID_ARGUMENT, std::string(fn) + ": " + arg + " is NULL");
}

// Out-of-range values pass through; the op's collective check names them and the rank.
inline fluxcpp::DType to_dtype(const fluxcpp_dtype_t& d) {
  // A C caller may pass any int; reading it as the C++ enum type would be undefined behaviour
  // for values outside the enumerators, so read the bytes.
  static_assert(sizeof(fluxcpp_dtype_t) == sizeof(int), "C enums are int-sized");
  int raw;
  std::memcpy(&raw, &d, sizeof raw);
  return static_cast<fluxcpp::DType>(raw);
}

// Every op's create: the out-pointer is cleared first; a NULL out-pointer still takes part in the
// collective construction (which then fails on every rank); a NULL context cannot.
template <typename Handle, typename Impl, typename Options>
fluxcpp_status_t create_op(const char* fn, fluxcpp_context_t ctx, const Options& options,
                           Handle** op) {
  if (op != nullptr) *op = nullptr;
  if (ctx == nullptr) return null_arg(fn, "ctx");
  return guarded([&] {
    auto impl = std::make_unique<Impl>(ctx->impl, options,
                                       op == nullptr ? "the op out-pointer is NULL" : "");
    *op = new Handle{std::move(impl)};
  });
}

// The fused GEMM ops share their create arguments.
template <typename Options>
Options gemm_options(int64_t max_m, int64_t n, int64_t k, const fluxcpp_dtype_t& input_dtype,
                     const fluxcpp_dtype_t& output_dtype, int transpose_weight) {
  Options o;
  o.max_m = max_m;
  o.n = n;
  o.k = k;
  o.input_dtype = to_dtype(input_dtype);
  o.output_dtype = to_dtype(output_dtype);
  o.transpose_weight = transpose_weight != 0;
  return o;
}

}  // namespace fluxcpp::capi
