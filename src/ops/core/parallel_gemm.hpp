// The GEMM of the fused ops spread over the context's compute workers.
#pragma once

#include <cstdint>

#include "comm/parts.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"

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

}  // namespace fluxcpp::ops
