// The GEMM of an op's block, in two splits: row tiles with transfer progress in between
// (tiled_gemm), each tile split into column slabs over the context's compute workers
// (parallel_gemm).
//
// Row tiles: while the network moves a block between
// hosts, the kernel and the NIC do the work, but MPI only advances inside MPI calls (gloo's TCP
// transport needs no driving). Calling the transport between tiles keeps the link busy without a
// thread that wakes into the GEMM's core (measured: this hides more of the link than a progress
// thread; docs/design.md).
#pragma once

#include <cstdint>
#include <functional>

#include "comm/parts.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::ops {

// The column slabs parallel_gemm splits [n0, n1) into for `workers` compute workers: one per
// worker, multiples of 64 columns, at least 64 each (a packed weight is packed for them).
kernels::ColumnSlabs column_slabs(int workers, int64_t n0, int64_t n1);

// C[0:rows, n0:n1] = A · op(B)[:, n0:n1] (+ bias), as kernels::gemm_tile (out.c points at column
// n0 of row 0), split into the column slabs above: each worker reads only its part of the weight
// and writes only its part of the output. The calling thread computes the first slab and waits
// for the others.
void parallel_gemm(const comm::Parts& c, const kernels::GemmWeight& w, const void* a, int64_t lda,
                   int64_t rows, int64_t n0, int64_t n1, const kernels::GemmOut& out);

// How tiled_gemm splits its rows. The engine's results depend on how a GEMM is split into calls
// (its edge kernels round differently), so an op whose bits must not depend on timing uses a
// split that depends on the shape only.
enum class Tiling {
  kAdaptive,  // tiles of about kTileFlops when the op has hosts to talk to, else one piece (by
              // the layout, not by what is in flight: a shape always makes the same calls)
  kFixed,     // always tiles of fixed_tile_rows(): the same calls whatever is in flight
  kSerial,    // kFixed, each tile one GEMM call on the calling thread: the same calls whatever
              // the thread count (the bitwise-reproducible ops)
  kSerialAcrossHosts,  // kSerial when the op has hosts to talk to, else one call on the calling
                       // thread: the reproducible ops' split (by the layout and shape only)
};

// C rows [0, rows) = A · op(B)[:, n0:n1] (+ bias), like parallel_gemm, split by `tiling` with
// core.poll() after each tile. `done(r)`: called after each tile with the rows finished so far
// (an op publishes them, so the transport ships a block while the rest of it is computed).
void tiled_gemm(OpCore& core, const kernels::GemmWeight& w, const void* a, int64_t lda,
                int64_t rows, int64_t n0, int64_t n1, const kernels::GemmOut& out,
                const std::function<void(int64_t rows_done)>& done = {},
                Tiling tiling = Tiling::kAdaptive);

// The rows of a tile of about kTileFlops for a GEMM of `cols` output columns and depth k.
int64_t fixed_tile_rows(int64_t cols, int64_t k);
// The rows tiled_gemm gives each tile of a GEMM of `rows` rows when tiles of about `tile` rows
// are wanted: the same number of tiles, equal, rounded up to a multiple of 16 (the last takes
// the rest). Depends on the shape only, so the split, and the bits, do not vary between calls.
int64_t balanced_tile_rows(int64_t rows, int64_t tile);

// The work of one tile: 1–2 ms of one core on the oneDNN engine (f32 ~200, bf16 ~400 GFLOP/s),
// about what a 10 Gbit/s link moves through the socket buffers between two polls.
inline constexpr double kTileFlops = 4e8;
// No tile has fewer rows: each call re-reads (and oneDNN re-blocks) the whole weight slab, which
// costs ~11 % at 64-row tiles and ~5 % at 128 (docs/benchmarks.md). A GEMM of at most this many
// rows (every decode shape) is one call that reads the weight once.
inline constexpr int64_t kMinTileRows = 128;

}  // namespace fluxcpp::ops
