// fluxcpp/packed_weight.hpp: a GEMM weight packed once, for weights that stay the same call after
// call (inference). docs/api.md, "Packed weights".
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

namespace kernels {
class PackedWeight;
}

// A copy of a weight in the layout the GEMM engine (oneDNN) computes on, so that a forward
// neither reads the weight as it lies nor re-blocks it per call (1.5–3× faster decode GEMMs;
// docs/benchmarks.md). Local (not collective), f32 and bf16; packed for the ops of `ctx` (whose
// compute threads each compute a column slab of it: those slabs are packed too). A snapshot: what
// the op computes with is the weight as it was when packed or last updated. After changing the
// weight in place, call update(); a PackedWeight never reads the caller's memory outside its
// constructor and update(). Packing costs about one to ten GEMM calls on the weight.
class FLUXCPP_API PackedWeight {
 public:
  // weight: [n, k] row-major ([k, n] when transpose_weight), as the ops' `weight` argument.
  PackedWeight(const Context& ctx, DType dtype, const void* weight, int64_t n, int64_t k,
               bool transpose_weight = false);
  PackedWeight(PackedWeight&&) noexcept;
  PackedWeight& operator=(PackedWeight&&) noexcept;
  ~PackedWeight();

  // Repacks from `weight` (same dtype, shape and orientation).
  void update(const void* weight);

  DType dtype() const;
  int64_t n() const;
  int64_t k() const;
  bool transpose_weight() const;
  std::size_t bytes() const;  // memory held

  const kernels::PackedWeight& impl() const;  // internal

 private:
  std::unique_ptr<kernels::PackedWeight> impl_;
};

}  // namespace fluxcpp
