// Backoff: the wait of a polling loop that must drive something between checks (MPI progress),
// so it cannot sleep on a futex: spins, then yields the core, then takes short naps, like the
// signal waits (spin and yield phases from the context's wait policy).
#pragma once

#include <sched.h>
#include <time.h>

#include <chrono>

#include "shm/signal.hpp"

namespace fluxcpp::ops {

class Backoff {
 public:
  explicit Backoff(const shm::WaitPolicy& policy)
      : policy_(policy), start_(std::chrono::steady_clock::now()) {}
  void pause() {
    const auto waited = std::chrono::steady_clock::now() - start_;
    if (waited < policy_.spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (waited < policy_.spin + policy_.yield) {
      sched_yield();
    } else {
      timespec ts{0, 20'000};  // 20 us: MPI progress needs polling, not a futex
      nanosleep(&ts, nullptr);
    }
  }

 private:
  shm::WaitPolicy policy_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fluxcpp::ops
