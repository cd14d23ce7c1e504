// The arguments of a dense GEMM op's call (ag_gemm, a2a_gemm), on its three paths, and the checks
// they share: the fused call, the GEMM alone and the communication alone take the same record.
#pragma once

#include <cstdint>
#include <string>

#include "comm/parts.hpp"
#include "kernels/gemm.hpp"
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

// The GEMM shape of a dense GEMM op's options (AgGemmOptions, GemmRsOptions, ...).
template <class Options>
GemmShape gemm_shape(const Options& o) {
  return {o.max_m, o.n, o.k, o.input_dtype, o.output_dtype, o.transpose_weight};
}

// The weight of a call as the GEMM reads it: the packed weight when given, else the caller's.
inline void prepare_weight(kernels::GemmWeight& w, const kernels::PackedWeight* packed,
                           const GemmShape& s, const void* weight) {
  if (packed != nullptr)
    w.prepare(*packed);
  else
    w.prepare(s.input_dtype, weight, s.n, s.k, s.transpose_weight);
}

// An op's forward with a packed weight: `slot` points at it while fn (the op's plain forward,
// which reads the weight from `slot`) runs, and is cleared afterwards, whatever happens.
template <class Fn>
void with_packed(const kernels::PackedWeight*& slot, const kernels::PackedWeight& weight, Fn&& fn) {
  struct Reset {
    const kernels::PackedWeight*& p;
    ~Reset() { p = nullptr; }
  } reset{slot};
  slot = &weight;
  fn();
}

// This rank's check of a call on `path` (local; the handshake fails it on every rank): the row
// count, the pointers the path needs (comm-only: the input alone), a packed weight's shape.
std::string check_gemm_call(const comm::Parts& c, const char* op, Path path, const GemmCall& a,
                            int64_t max_m, const GemmShape& shape);

}  // namespace fluxcpp::ops
