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
#include "ops/core/op_base.hpp"
#include "ops/core/refusal.hpp"

struct fluxcpp_context_s {
  std::shared_ptr<fluxcpp::detail::ContextImpl> impl;
  bool shared = false;  // made by fluxcpp_context_share: its destroy only drops the reference
};

namespace fluxcpp::capi {

// The message of the last failure on this thread (fluxcpp_last_error).
std::string& last_error();

inline fluxcpp_status_t fail(fluxcpp_status_t s, std::string msg) {
  fluxcpp::ops::call_refusal().clear();  // a refusal lasts one call (fluxcpp_refuse_next_call)
  last_error() = std::move(msg);
  return s;
}

template <typename F>
fluxcpp_status_t guarded(F&& f) noexcept {
  try {
    f();
    fluxcpp::ops::call_refusal().clear();  // a refusal lasts one call (fluxcpp_refuse_next_call)
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

// Every op's C handle owns its implementation directly, so the C layer can pass a rank-local
// argument error into the collective constructors (every rank then fails alike instead of
// hanging). The C structs derive from Handle<Impl>; most are defined by FLUXCPP_CAPI_HANDLE.
template <typename I>
struct Handle {
  using Impl = I;
  std::unique_ptr<Impl> impl;
};

// The destroy of a handle whose implementation's destructor does all the work: NULL is a no-op.
template <typename H>
fluxcpp_status_t destroy_op(H* op) {
  delete op;
  return FLUXCPP_SUCCESS;
}

// Every op's create: the out-pointer is cleared first; a NULL out-pointer still takes part in the
// collective construction (which then fails on every rank), as does a rank-local local_error; a
// NULL context cannot.
template <typename H, typename Options>
fluxcpp_status_t create_op(const char* fn, fluxcpp_context_t ctx, const Options& options, H** op,
                           const std::string& local_error = {}) {
  if (op != nullptr) *op = nullptr;
  if (ctx == nullptr) return null_arg(fn, "ctx");
  return guarded([&] {
    auto impl = ops::make_op<typename H::Impl>(
        ctx->impl, options, op == nullptr ? "the op out-pointer is NULL" : local_error);
    *op = new H{{std::move(impl)}};
  });
}

// Every call on an op: a NULL handle is an argument error naming fn and the handle's parameter;
// otherwise f(implementation), its exceptions mapped to a status (see guarded).
template <typename H, typename F>
fluxcpp_status_t call_op(const char* fn, H* op, F&& f, const char* handle_name = "op") {
  if (op == nullptr) return null_arg(fn, handle_name);
  return guarded([&] { f(*op->impl); });
}

template <typename T>
struct NoDeduce {
  using type = T;
};

// As call_op, for a call whose result goes to a required out-parameter: NULL is an argument
// error naming it; else *out is set to `cleared`, then to f(implementation) if that succeeds.
template <typename H, typename T, typename F>
fluxcpp_status_t call_op_out(const char* fn, H* op, const char* out_name, T* out,
                             typename NoDeduce<T>::type cleared, F&& f) {
  if (op == nullptr) return null_arg(fn, "op");
  if (out == nullptr) return null_arg(fn, out_name);
  *out = cleared;
  return guarded([&] { *out = f(*op->impl); });
}

// fluxcpp_<op>_input_buffer of the ops with zero-copy input.
template <typename H>
fluxcpp_status_t input_buffer(const char* fn, H* op, void** buffer) {
  return call_op_out(fn, op, "buffer", buffer, nullptr,
                     [](auto& impl) { return impl.input_buffer(); });
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

// Defines the C handle struct fluxcpp_<name>_s over Impl and its destroy, fluxcpp_<name>_destroy
// (destroy_op). Use at global scope, outside extern "C" (the destroy's declaration in fluxcpp.h
// gives it C linkage).
#define FLUXCPP_CAPI_HANDLE(name, Impl)                              \
  struct fluxcpp_##name##_s : fluxcpp::capi::Handle<Impl> {};        \
  fluxcpp_status_t fluxcpp_##name##_destroy(fluxcpp_##name##_t op) { \
    return fluxcpp::capi::destroy_op(op);                            \
  }
