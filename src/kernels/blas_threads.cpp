#include "kernels/blas_threads.hpp"

#include <cblas.h>

#include <mutex>

#include "error_util.hpp"

namespace fluxcpp::kernels {

namespace {

struct ScopeState {
  std::mutex mu;
  int depth = 0;  // scopes alive; guarded by mu
  int saved = 1;  // the count to restore when depth drops to 0; guarded by mu
};

ScopeState& scope_state() {
  // Leaked on purpose: a scope may still end in a static destructor at exit.
  static ScopeState* s = new ScopeState;
  return *s;
}

}  // namespace

int blas_set_threads(int threads) {
  FLUXCPP_CHECK_ARG(threads >= 1, "blas_set_threads: threads must be >= 1, got {}", threads);
  const int previous = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  return previous;
}

int blas_get_threads() {
  return openblas_get_num_threads();
}

BlasSingleThreadScope::BlasSingleThreadScope() noexcept {
  ScopeState& s = scope_state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.depth++ == 0) {
    s.saved = openblas_get_num_threads();
    // Setting the count is not free (OpenBLAS may resize its pool): skip it when already 1.
    if (s.saved != 1) openblas_set_num_threads(1);
  }
}

BlasSingleThreadScope::~BlasSingleThreadScope() {
  ScopeState& s = scope_state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (--s.depth == 0 && s.saved != 1) openblas_set_num_threads(s.saved);
}

int BlasSingleThreadScope::active() noexcept {
  ScopeState& s = scope_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.depth;
}

}  // namespace fluxcpp::kernels
