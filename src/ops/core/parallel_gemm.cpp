#include "ops/core/parallel_gemm.hpp"

#include <algorithm>

#include "comm/parallel_for.hpp"

namespace fluxcpp::ops {

kernels::ColumnSlabs column_slabs(int workers, int64_t n0, int64_t n1) {
  kernels::ColumnSlabs slabs;
  if (n0 >= n1) return slabs;
  const int64_t n = n1 - n0;
  // Slabs of at least 64 columns, on 64-column boundaries (the engine's column blocks).
  const int T = std::max(1, std::min<int>(workers, static_cast<int>(n / 64)));
  const int64_t slab = ((n + T - 1) / T + 63) / 64 * 64;  // T slabs cover all n columns
  for (int t = 0; t < T; ++t) {
    const int64_t s0 = std::min(n1, n0 + t * slab), s1 = t == T - 1 ? n1 : std::min(n1, s0 + slab);
    if (s0 < s1) slabs.emplace_back(s0, s1);
  }
  return slabs;
}

void parallel_gemm(const comm::Parts& c, const kernels::GemmWeight& w, const void* a, int64_t lda,
                   int64_t rows, int64_t n0, int64_t n1, const kernels::GemmOut& out) {
  if (rows <= 0 || n0 >= n1) return;
  const kernels::ColumnSlabs slabs = column_slabs(c.runtime().num_compute_workers(), n0, n1);
  if (slabs.size() <= 1) {
    kernels::gemm_tile(w, a, lda, rows, n0, n1, out);
    return;
  }
  const std::size_t esz = dtype_size(out.dtype);
  comm::parallel_for(c.runtime(), static_cast<int>(slabs.size()), [&](int t) {
    const auto [s0, s1] = slabs[t];
    kernels::GemmOut ot = out;
    ot.c = static_cast<char*>(out.c) + (s0 - n0) * esz;
    kernels::gemm_tile(w, a, lda, rows, s0, s1, ot);
  });
}

}  // namespace fluxcpp::ops
