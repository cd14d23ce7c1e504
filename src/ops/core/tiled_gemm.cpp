#include "ops/core/tiled_gemm.hpp"

#include <algorithm>
#include <cmath>

#include "ops/core/parallel_gemm.hpp"

namespace fluxcpp::ops {

void tiled_gemm(OpCore& core, const kernels::GemmWeight& w, const void* a, int64_t lda,
                int64_t rows, int64_t n0, int64_t n1, const kernels::GemmOut& out,
                const std::function<void(int64_t rows_done)>& done) {
  detail::ContextImpl& c = core.ctx();
  if (rows <= 0 || n0 >= n1) return;
  if (!core.transfers_pending()) {
    parallel_gemm(c, w, a, lda, rows, n0, n1, out);
    if (done) done(rows);
    return;
  }
  const double per_row = 2.0 * static_cast<double>(n1 - n0) * static_cast<double>(w.k());
  const int64_t tile = std::max<int64_t>(32, static_cast<int64_t>(std::ceil(kTileFlops / per_row)));
  const std::size_t a_row = static_cast<std::size_t>(lda) * dtype_size(w.input_dtype());
  const std::size_t c_row = static_cast<std::size_t>(out.ldc) * dtype_size(out.dtype);
  for (int64_t i = 0; i < rows; i += tile) {
    kernels::GemmOut o = out;
    o.c = static_cast<char*>(out.c) + static_cast<std::size_t>(i) * c_row;
    parallel_gemm(c, w, static_cast<const char*>(a) + static_cast<std::size_t>(i) * a_row, lda,
                  std::min(tile, rows - i), n0, n1, o);
    if (done) done(std::min(rows, i + tile));
    core.poll();
  }
}

}  // namespace fluxcpp::ops
