// The OpenMP thread count of the calling thread, set for the length of a scope. oneDNN (built on
// OpenMP here, as PyTorch's CPU kernels are) sizes its parallel regions from the calling thread's
// omp_get_max_threads(); the caller's value is restored when the scope ends, so an op never
// changes what the caller's thread sees (PyTorch shares the same OpenMP runtime in the process).
//
// The setting is a per-thread OpenMP ICV: other threads of the process, and OpenMP regions the
// caller runs before or after, never see it.
#pragma once

namespace fluxcpp::kernels {

class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int threads) noexcept;
  ~OmpThreadsScope();
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int saved_;
};

// omp_get_max_threads() of the calling thread (tests).
int omp_max_threads() noexcept;

}  // namespace fluxcpp::kernels
