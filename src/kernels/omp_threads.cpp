#include "kernels/omp_threads.hpp"

#include <omp.h>

namespace fluxcpp::kernels {

OmpThreadsScope::OmpThreadsScope(int threads) noexcept : saved_(omp_get_max_threads()) {
  if (saved_ != threads) omp_set_num_threads(threads);
}

OmpThreadsScope::~OmpThreadsScope() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

int omp_max_threads() noexcept {
  return omp_get_max_threads();
}

}  // namespace fluxcpp::kernels
