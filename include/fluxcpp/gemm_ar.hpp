// fluxcpp/gemm_ar.hpp: GemmAR — GEMM fused with a deterministic all-reduce (row-parallel linear
// with replicated activations: the decode path of tensor-parallel inference).
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/packed_weight.hpp"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct GemmArOptions {
  int64_t max_m = 0;                    // largest row count a forward may pass
  int64_t n = 0;                        // output columns
  int64_t k = 0;                        // this rank's slice of the reduction dimension
  DType input_dtype = DType::kFloat32;  // input and weight
  DType output_dtype =
      DType::kFloat32;            // output and bias; pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
  bool transpose_weight = false;  // weight is [k, n] instead of [n, k]
};

namespace detail {
class GemmArImpl;
}

class FLUXCPP_API GemmAr {
 public:
  // Collective: every rank passes the same options, else every rank throws kInvalidArgument.
  GemmAr(const Context& ctx, const GemmArOptions& options);
  GemmAr(GemmAr&&) noexcept;
  GemmAr& operator=(GemmAr&&) noexcept;
  ~GemmAr();  // noexcept; never communicates

  // Collective, blocking. input [m, k] (this rank's K slice); weight [n, k] ([k, n] when
  // transposed); bias [n] in the output dtype or null, the same on every rank, added once;
  // output [m, n] = Σ_s input_s · weight_sᵀ + bias on every rank. Any m <= max_m, the same on
  // every rank; m == 0 is a no-op. The partial products stay in f32 (f64 for f64) until the sum,
  // taken in AllReduce's fixed order (the bias joins world rank 0's partial) and rounded once:
  // bitwise identical on every rank and from call to call.
  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output);
  // The same with the weight packed once (fluxcpp/packed_weight.hpp).
  void forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
               void* output);

  const GemmArOptions& options() const;

 private:
  std::unique_ptr<detail::GemmArImpl> impl_;
};

using GemmAllReduce = GemmAr;  // FLUX-style name

}  // namespace fluxcpp
