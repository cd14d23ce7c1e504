// A GEMM weight packed once into the layout oneDNN's matmul computes on, for weights that stay
// the same call after call (inference). It is a snapshot: the packed copy is the weight from
// then on; later writes to the source are not seen until update() repacks it.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "fluxcpp/types.hpp"

namespace fluxcpp::kernels {

class PackedLayout;  // oneDNN descriptors; kernels/packed_layout.hpp

// Column ranges [n0, n1) of a GEMM split over workers.
using ColumnSlabs = std::vector<std::pair<int64_t, int64_t>>;

class PackedWeight {
 public:
  // weight as GemmWeight::prepare takes it: [n, k] (or [k, n] when transposed), leading
  // dimension ld (0: contiguous); f32 or bf16. Packs the whole weight and, when the GEMMs that
  // use it are split over workers, each column slab of that split (oneDNN blocks a narrower
  // matrix differently, so a slab is no view of the whole). Runs on the calling thread.
  PackedWeight(DType dtype, const void* weight, int64_t n, int64_t k, bool transposed,
               int64_t ld = 0, ColumnSlabs slabs = {});
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
  PackedLayout& layout() const { return *layout_; }

 private:
  DType dtype_;
  int64_t n_, k_;
  bool transposed_;
  ColumnSlabs slabs_;
  std::unique_ptr<PackedLayout> layout_;
};

}  // namespace fluxcpp::kernels
