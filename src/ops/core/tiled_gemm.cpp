#include "ops/core/tiled_gemm.hpp"

#include <algorithm>
#include <cmath>

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

int64_t fixed_tile_rows(int64_t cols, int64_t k) {
  const double per_row = 2.0 * static_cast<double>(cols) * static_cast<double>(k);
  return std::max<int64_t>(kMinTileRows, static_cast<int64_t>(std::ceil(kTileFlops / per_row)));
}

int64_t balanced_tile_rows(int64_t rows, int64_t tile) {
  // As many tiles as tiles of `tile` rows would make, of equal rows rounded up to 16 (oneDNN's
  // AMX and AVX-512 kernels block rows by 16; some other counts take a path up to 2.5x slower:
  // 117 rows of 1024 x 1408 bf16 took 1.44 ms where 128 took 0.60), and never below
  // kMinTileRows unless the whole is.
  constexpr int64_t kRowBlock = 16;
  auto split = [&](int64_t count) {
    const int64_t per = (rows + count - 1) / count;
    return (per + kRowBlock - 1) / kRowBlock * kRowBlock;
  };
  int64_t per = split((rows + tile - 1) / tile);
  if (per < kMinTileRows) per = split(std::max<int64_t>(1, rows / kMinTileRows));
  return std::max<int64_t>(1, per);
}

void tiled_gemm(OpCore& core, const kernels::GemmWeight& w, const void* a, int64_t lda,
                int64_t rows, int64_t n0, int64_t n1, const kernels::GemmOut& out,
                const std::function<void(int64_t rows_done)>& done, Tiling tiling) {
  const comm::Parts& c = core.parts();
  if (rows <= 0 || n0 >= n1) return;
  if (tiling == Tiling::kAdaptive && !core.multi_host()) {
    parallel_gemm(c, w, a, lda, rows, n0, n1, out);
    if (done) done(rows);
    return;
  }
  if (tiling == Tiling::kSerialAcrossHosts && !core.multi_host()) {
    kernels::gemm_tile(w, a, lda, rows, n0, n1, out);
    if (done) done(rows);
    return;
  }
  const int64_t tile = balanced_tile_rows(rows, fixed_tile_rows(n1 - n0, w.k()));
  const std::size_t a_row = static_cast<std::size_t>(lda) * dtype_size(w.input_dtype());
  const std::size_t c_row = static_cast<std::size_t>(out.ldc) * dtype_size(out.dtype);
  for (int64_t i = 0; i < rows; i += tile) {
    kernels::GemmOut o = out;
    o.c = static_cast<char*>(out.c) + static_cast<std::size_t>(i) * c_row;
    const char* ai = static_cast<const char*>(a) + static_cast<std::size_t>(i) * a_row;
    const int64_t r = std::min(tile, rows - i);
    if (tiling == Tiling::kSerial || tiling == Tiling::kSerialAcrossHosts)
      kernels::gemm_tile(w, ai, lda, r, n0, n1, o);
    else
      parallel_gemm(c, w, ai, lda, r, n0, n1, o);
    if (done) done(std::min(rows, i + tile));
    core.poll();
  }
}

}  // namespace fluxcpp::ops
