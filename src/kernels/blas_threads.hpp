// OpenBLAS's thread count. fluxcpp's own workers provide the parallelism of a GEMM op, so each
// BLAS call inside an op runs on one thread (OpenBLAS's pool would oversubscribe the cores and
// spin against our workers). The caller's setting is restored when the last op call leaves.
//
// OpenBLAS has one process-wide setting (0.3.21: no per-thread count), so a host thread that runs
// OpenBLAS while a GEMM op call is in progress runs it single-threaded too.
#pragma once

namespace fluxcpp::kernels {

// Sets OpenBLAS's thread count (process-wide). Returns the previous setting. threads >= 1.
int blas_set_threads(int threads);
int blas_get_threads();

// Holds OpenBLAS at one thread while any scope is alive, in any thread of the process. The first
// scope to enter saves the current count and sets 1; the last to leave restores the saved count.
// Scopes nest and may live on several threads at once (a process-wide count under a mutex).
// Not copyable, not movable: it lives for the duration of one op call.
class BlasSingleThreadScope {
 public:
  BlasSingleThreadScope() noexcept;
  ~BlasSingleThreadScope();
  BlasSingleThreadScope(const BlasSingleThreadScope&) = delete;
  BlasSingleThreadScope& operator=(const BlasSingleThreadScope&) = delete;

  // Scopes alive in the process (for tests and diagnostics).
  static int active() noexcept;
};

}  // namespace fluxcpp::kernels
