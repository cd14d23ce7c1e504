// The oneDNN side of a PackedWeight: its descriptor and bytes. Private to src/kernels.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace fluxcpp::kernels {

struct PackedLayout {
  dnnl::memory::desc desc;  // [k, n] in the matmul's blocked layout
  dnnl::memory mem;         // owns the packed bytes

  // The columns [n0, n1) in the layout `want` (what a matmul over those columns asked for):
  // `mem` itself for the whole weight in its own layout, else a copy packed from `mem` on first
  // use and kept (the column slabs of several compute workers: oneDNN blocks a narrower matrix
  // differently, so a slab is no view of the whole). Thread-safe; the address stays valid until
  // clear_slabs().
  const void* columns(int64_t n0, int64_t n1, const dnnl::memory::desc& want);
  void clear_slabs();
  std::size_t slab_bytes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, dnnl::memory> slabs_;  // guarded by mu_
};

}  // namespace fluxcpp::kernels
