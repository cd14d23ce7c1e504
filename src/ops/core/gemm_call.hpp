// The arguments of a dense GEMM op's call (ag_gemm, a2a_gemm), on its three paths, and the checks
// they share: the fused call, the GEMM alone and the communication alone take the same record.
#pragma once

#include <cstdint>
#include <string>

#include "comm/context_impl.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::ops {

struct GemmCall {
  const char* input = nullptr;
  int64_t m = 0;
  const void* weight = nullptr;
  const void* bias = nullptr;
  char* output = nullptr;
  char* moved = nullptr;   // the communication's result for the caller (gathered rows, a2a output)
  bool zero_copy = false;  // the input is the op's zero-copy buffer
  const kernels::PackedWeight* packed = nullptr;  // instead of `weight` when set

  static GemmCall fused(const void* input, int64_t m, const void* weight, const void* bias,
                        void* output, void* moved) {
    return {static_cast<const char*>(input), m, weight, bias, static_cast<char*>(output),
            static_cast<char*>(moved)};
  }
  static GemmCall gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                            void* output) {
    return fused(input, m, weight, bias, output, nullptr);
  }
  static GemmCall comm_only(const void* input, int64_t m, void* moved) {
    return fused(input, m, nullptr, nullptr, nullptr, moved);
  }
};

// This rank's check of a call on `path` (local; the handshake fails it on every rank): the row
// count, the pointers the path needs (comm-only: the input alone), a packed weight's shape.
std::string check_gemm_call(const detail::ContextImpl& c, const char* op, Path path,
                            const GemmCall& a, int64_t max_m, const GemmShape& shape);

}  // namespace fluxcpp::ops
