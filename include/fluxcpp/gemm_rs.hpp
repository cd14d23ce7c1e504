// fluxcpp/gemm_rs.hpp: GemmRS — GEMM fused with a deterministic reduce-scatter (row-parallel
// linear).
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/packed_weight.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct GemmRsOptions {
  int64_t max_m = 0;                    // largest total row count a forward may pass
  int64_t n = 0;                        // output columns
  int64_t k = 0;                        // this rank's slice of the reduction dimension
  DType input_dtype = DType::kFloat32;  // input and weight
  DType output_dtype =
      DType::kFloat32;            // output and bias; pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
  bool transpose_weight = false;  // weight is [k, n] instead of [n, k]
};

namespace detail {
class GemmRsImpl;
}

class FLUXCPP_API GemmRs {
 public:
  // Collective: validates (every rank must pass the same options) and allocates the symmetric
  // buffers. Errors are raised on every rank.
  GemmRs(const Context& ctx, const GemmRsOptions& options);
  GemmRs(GemmRs&&) noexcept;
  GemmRs& operator=(GemmRs&&) noexcept;
  ~GemmRs();  // noexcept; never communicates

  // Collective, blocking. input [m, k] (this rank's K slice); weight [n, k] ([k, n] when
  // transposed); bias [n] in the output dtype or null, the same on every rank, added once;
  // output [m/W, n] = rows [r*m/W, (r+1)*m/W) of Σ_s input_s · weight_sᵀ + bias. Partial
  // products stay in f32 (f64 for f64) until the final sum, which is taken in a fixed order (the
  // order of ReduceScatter) and rounded once: bitwise identical from call to call and run to
  // run. m % W == 0, m <= max_m, same m everywhere; m == 0 is a no-op.
  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output);
  // The same with the weight packed once (fluxcpp/packed_weight.hpp): its dtype, n, k and
  // orientation must match the options (INVALID_ARGUMENT on every rank otherwise).
  void forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
               void* output);

  // Benchmark paths. gemm-only (local): the partial GEMMs alone, into the op's buffers.
  // comm-only (collective): adds bias to this rank's own held partial and reduce-scatters the
  // partials the buffers hold — after one gemm-only with the same arguments it yields forward's
  // output; call gemm-only again before another comm-only if the output matters.
  void forward_gemm_only(const void* input, int64_t m, const void* weight);
  void forward_comm_only(int64_t m, const void* bias, void* output);

  const GemmRsOptions& options() const;

 private:
  std::unique_ptr<detail::GemmRsImpl> impl_;
};

}  // namespace fluxcpp
