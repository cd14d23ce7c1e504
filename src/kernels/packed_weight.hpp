// A GEMM weight packed once into the layout oneDNN's matmul computes on, for weights that stay
// the same call after call (inference). It is a snapshot: the packed copy is the weight from
// then on; later writes to the source are not seen until update() repacks it.
#pragma once

#include <cstdint>
#include <memory>

#include "fluxcpp/types.hpp"

namespace fluxcpp::kernels {

struct PackedLayout;  // oneDNN descriptors; kernels/packed_layout.hpp

class PackedWeight {
 public:
  // weight as GemmWeight::prepare takes it: [n, k] (or [k, n] when transposed), leading
  // dimension ld (0: contiguous); f32 or bf16. Packing runs on the calling thread.
  PackedWeight(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
               int64_t ld = 0);
  ~PackedWeight();
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  // Repacks from `weight` (same shape, dtype and orientation as at construction).
  void update(const void* weight, int64_t ld = 0);

  DType dtype() const { return dtype_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  bool transposed() const { return transposed_; }
  std::size_t bytes() const;
  // A GEMM over all n columns reads the packed layout in place; the column slabs of several
  // compute workers are each packed once more on first use and kept (bytes() counts them).
  PackedLayout& layout() const { return *layout_; }

 private:
  DType dtype_;
  int64_t n_, k_;
  bool transposed_;
  std::unique_ptr<PackedLayout> layout_;
};

}  // namespace fluxcpp::kernels
