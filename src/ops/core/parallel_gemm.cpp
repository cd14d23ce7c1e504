#include "ops/core/parallel_gemm.hpp"

#include <algorithm>
#include <exception>
#include <vector>

namespace fluxcpp::ops {

void parallel_gemm(detail::ContextImpl& c, const kernels::GemmWeight& w, const void* a, int64_t lda,
                   int64_t rows, int64_t n0, int64_t n1, const kernels::GemmOut& out) {
  if (rows <= 0 || n0 >= n1) return;
  const int64_t n = n1 - n0;
  // Slabs of at least 64 columns, on 64-column boundaries (the engine's column blocks).
  const int T = std::max(1, std::min<int>(c.num_compute_workers(), static_cast<int>(n / 64)));
  if (T <= 1) {
    kernels::gemm_tile(w, a, lda, rows, n0, n1, out);
    return;
  }
  const int64_t slab = ((n + T - 1) / T + 63) / 64 * 64;  // T slabs cover all n columns
  const std::size_t esz = dtype_size(out.dtype);
  std::vector<uint64_t> tickets;
  for (int t = 1; t < T; ++t) {
    const int64_t s0 = std::min(n1, n0 + t * slab), s1 = t == T - 1 ? n1 : std::min(n1, s0 + slab);
    if (s0 >= s1) break;
    kernels::GemmOut ot = out;
    ot.c = static_cast<char*>(out.c) + (s0 - n0) * esz;
    tickets.push_back(c.compute_worker(t).enqueue(
        [&w, a, lda, rows, s0, s1, ot] { kernels::gemm_tile(w, a, lda, rows, s0, s1, ot); }));
  }
  std::exception_ptr failed;
  try {
    kernels::gemm_tile(w, a, lda, rows, n0, std::min(n1, n0 + slab), out);
  } catch (...) {
    failed = std::current_exception();
  }
  const auto forever = std::chrono::steady_clock::time_point::max();
  for (std::size_t i = 0; i < tickets.size(); ++i) {
    try {
      c.compute_worker(static_cast<int>(i) + 1).wait(tickets[i], forever);
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace fluxcpp::ops
