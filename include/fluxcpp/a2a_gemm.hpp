// fluxcpp/a2a_gemm.hpp: all-to-all with equal splits fused with the GEMM that consumes it.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct A2aGemmOptions {
  int64_t max_m = 0;                    // largest row count a forward may pass
  int64_t n = 0;                        // output columns
  int64_t k = 0;                        // reduction dimension (row length of input)
  DType input_dtype = DType::kFloat32;  // input, weight and a2a_output
  DType output_dtype =
      DType::kFloat32;            // output and bias; pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
  bool transpose_weight = false;  // weight is [k, n] instead of [n, k]
};

namespace detail {
class A2aGemmImpl;
}

class FLUXCPP_API A2aGemm {
 public:
  // Collective: validates (every rank must pass the same options) and allocates the symmetric
  // buffers. Errors are raised on every rank.
  A2aGemm(const Context& ctx, const A2aGemmOptions& options);
  A2aGemm(A2aGemm&&) noexcept;
  A2aGemm& operator=(A2aGemm&&) noexcept;
  ~A2aGemm();  // noexcept; never communicates

  // Collective, blocking. input [m, k]: row block t (m/W rows) goes to rank t. a2a_output
  // [m, k] or null: block s receives what rank s sent here. output [m, n] = a2a_output ·
  // weightᵀ + bias (bias [n] in the output dtype or null). weight [n, k] ([k, n] when
  // transposed). m % W == 0, m <= max_m, same m on every rank; m == 0 is a no-op. The GEMM of
  // block s starts as soon as s's rows have landed, the own block first.
  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output,
               void* a2a_output = nullptr);

  // Benchmark paths. gemm-only (local): the same GEMMs as a forward over the rows already in
  // place (the own block from `input`, the others where the last exchange left them), no waits.
  // comm-only (collective): the all-to-all alone, into a2a_output (or nowhere when null).
  void forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output);
  void forward_comm_only(const void* input, int64_t m, void* a2a_output = nullptr);

  // Zero-copy input (not collective): waits until every peer has finished reading this rank's
  // slot for the previous forward (kTimeout naming the peer otherwise) and returns it: room for
  // max_m rows of k input elements. Write this call's input there and pass it to forward as
  // `input`: forward then skips copying it. Call it again before each write.
  void* input_buffer();

  const A2aGemmOptions& options() const;

 private:
  std::unique_ptr<detail::A2aGemmImpl> impl_;
};

}  // namespace fluxcpp
