#include "process_owner.hpp"

#include <pthread.h>

#include <atomic>

namespace fluxcpp {

namespace {

std::atomic<pid_t>& cached() {
  static std::atomic<pid_t> pid{[] {
    ::pthread_atfork(nullptr, nullptr,
                     [] { cached().store(::getpid(), std::memory_order_relaxed); });
    return ::getpid();
  }()};
  return pid;
}

}  // namespace

pid_t current_pid() noexcept {
  return cached().load(std::memory_order_relaxed);
}

}  // namespace fluxcpp
