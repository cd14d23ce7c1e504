// fluxcpp/grouped_gemm.hpp: GemmGroupedV3 — one GEMM per group of consecutive rows, each with
// its own weight (the expert GEMMs of an MoE layer). Local: only the calling rank is involved.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct GroupedGemmOptions {
  int64_t num_groups = 0;                // G >= 1
  int64_t max_m = 0;                     // largest total row count (Σ splits) a forward may pass
  int64_t n = 0;                         // output columns of every group
  int64_t k = 0;                         // reduction dimension
  DType input_dtype = DType::kFloat32;   // input and weight
  DType output_dtype = DType::kFloat32;  // pairs: f32/f32, f64/f64, bf16/bf16, bf16/f32
  bool transpose_weight = false;         // each group's weight is [k, n] instead of [n, k]
};

namespace detail {
class GroupedGemmImpl;
}

class FLUXCPP_API GroupedGemm {
 public:
  // Local (not collective): validates the options on this rank only; the context supplies the
  // compute threads. Invalid options raise Error(kInvalidArgument); a closed context
  // Error(kInvalidUsage).
  GroupedGemm(const Context& ctx, const GroupedGemmOptions& options);
  GroupedGemm(GroupedGemm&&) noexcept;
  GroupedGemm& operator=(GroupedGemm&&) noexcept;
  ~GroupedGemm();

  // Local, blocking. splits [G] >= 0, m = Σ splits <= max_m, P[g] = Σ_{g'<g} splits[g'];
  // input [m, k]; weight [G, n, k] (group g at g·n·k; [G, k, n] when transposed); scale [G] f32 or
  // null (1). output [m, n]: for P[g] <= i < P[g+1],
  //   output[i][j] = round(scale[g] · Σ_c input[i][c] · W_g[j][c]),
  // accumulated in f32 (f64 for f64), the scale applied in that type, rounded once to the output
  // dtype. Empty groups are skipped (their weights are not read); m == 0 is a no-op (only splits
  // is read). Bad arguments raise Error(kInvalidArgument) naming grouped_gemm, the argument and
  // the values, write nothing and leave the op usable. OpenBLAS runs single-threaded during the
  // call (the compute threads are the parallelism); its thread count is restored afterwards.
  // Used by one thread at a time: a second thread gets Error(kInvalidUsage).
  void forward(const void* input, const int64_t* splits, const void* weight, const float* scale,
               void* output);

  const GroupedGemmOptions& options() const;

 private:
  std::unique_ptr<detail::GroupedGemmImpl> impl_;
};

}  // namespace fluxcpp
