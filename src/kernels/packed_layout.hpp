// The oneDNN side of a PackedWeight: its descriptors and bytes. Private to src/kernels.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <deque>
#include <mutex>

namespace fluxcpp::kernels {

// A block of columns [n0, n1) of the weight, packed in the layout `mem` describes.
struct PackedSlab {
  int64_t n0 = 0, n1 = 0;
  dnnl::memory mem;
};

class PackedLayout {
 public:
  // The layout a matmul over `cols` columns of depth k asks for (format_tag::any).
  static dnnl::memory::desc layout_for(dnnl::memory::data_type dt, int64_t k, int64_t cols);

  // Packs the columns [n0, n1) of the plain weight `plain` (the whole [k, n] matrix) as a slab
  // that forwards find with columns(): the whole weight and the planned slabs.
  void add(const dnnl::memory& plain, int64_t n0, int64_t n1, int64_t ld, bool transposed);
  // Forgets every slab (update() packs them again).
  void clear();

  // The columns [n0, n1) in the layout `want` (what a matmul over those columns asked for): a
  // slab packed for it (the whole weight, or a compute worker's slab of the plan it was packed
  // for), else one packed now from the whole weight, kept and never replaced (a thread may still
  // compute on a slab another asks about). Thread-safe; addresses stay valid until clear().
  const void* columns(int64_t n0, int64_t n1, const dnnl::memory::desc& want);
  std::size_t bytes() const;

 private:
  const PackedSlab* find(int64_t n0, int64_t n1, const dnnl::memory::desc& want) const;
  mutable std::mutex mu_;
  std::deque<PackedSlab> slabs_;  // guarded by mu_; the first is the whole weight
};

}  // namespace fluxcpp::kernels
