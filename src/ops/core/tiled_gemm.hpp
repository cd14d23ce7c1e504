// A GEMM over row tiles with transfer progress in between: while MPI moves a block between
// hosts, the kernel and the NIC do the work, but MPI only advances inside MPI calls. Calling the
// transport between tiles keeps the link busy without a thread that wakes into the GEMM's core
// (measured: this hides more of the link than a progress thread; docs/design.md).
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/gemm.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::ops {

// C rows [0, rows) = A · op(B)[:, n0:n1] (+ bias), like parallel_gemm; in tiles of about
// kTileFlops with core.poll() after each while transfers are pending, else in one piece.
// `done(r)`: called after each tile with the rows finished so far (an op publishes them, so the
// transport ships a block while the rest of it is computed).
void tiled_gemm(OpCore& core, const kernels::GemmWeight& w, const void* a, int64_t lda,
                int64_t rows, int64_t n0, int64_t n1, const kernels::GemmOut& out,
                const std::function<void(int64_t rows_done)>& done = {});

// The work of one tile: ~3 ms of one core, about what a 10 Gbit/s link moves through the socket
// buffers between two polls. Smaller tiles cost a weight repack each (OpenBLAS).
inline constexpr double kTileFlops = 1.3e8;

}  // namespace fluxcpp::ops
