// Argument checks shared by the operators, so that every op reports the same mistakes with the
// same words (op, argument, values, rank).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>

#include "comm/parts.hpp"
#include "fluxcpp/types.hpp"
#include "kernels/gemm_packed_weight.hpp"

namespace fluxcpp::ops {

// Forward-time checks of the row count and required pointers, local to this rank: returns ""
// or the message (the per-call handshake then fails the call on every rank with it).
// `required`: (name, pointer) pairs that must be non-null when m > 0.
std::string check_forward(const comm::Parts& c, const char* op, int64_t m, int64_t max_m,
                          std::initializer_list<std::pair<const char*, const void*>> required);

// As check_forward for a size with no divisibility rule: `name`=value in [0, max] (the message
// names max as `max_name`, or "max_<name>"), required pointers non-null when value > 0.
std::string check_count(const comm::Parts& c, const char* op, const char* name, int64_t value,
                        int64_t max,
                        std::initializer_list<std::pair<const char*, const void*>> required,
                        const char* max_name = nullptr);

// Whether [a, a + bytes) and [b, b + bytes) share a byte.
bool overlaps(const void* a, const void* b, std::size_t bytes);
// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes);

// A packed weight passed to a GEMM op must match its options: "" or the message (local, as
// check_forward's).
std::string check_packed(const comm::Parts& c, const char* op, const kernels::PackedWeight& w,
                         DType dtype, int64_t n, int64_t k, bool transpose_weight);

// The (input, output) dtype pairs of the GEMM ops: (f32, f32), (f64, f64), (bf16, bf16),
// (bf16, f32).
bool valid_gemm_dtypes(DType in, DType out);

// Create-time checks of the fused GEMM ops (collective): a closed context, a rank-local error,
// the (input, output) dtype pair, the sizes, `extra` op-specific local checks; then every rank
// must have passed the same shape. Raises the same Error on every rank.
struct GemmShape {
  int64_t max_m, n, k;
  DType input_dtype, output_dtype;
  bool transpose_weight;
};
void check_gemm_create(const comm::Parts& c, const char* op, const GemmShape& s,
                       const std::string& local_error, const std::function<void()>& extra = {});

}  // namespace fluxcpp::ops
