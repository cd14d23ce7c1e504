// Copy offload: the data movement of a fused op runs as one task on a comm stream while the
// calling thread computes (the CPU counterpart of a copy stream beside the GEMM kernel). Used
// when Config::copy_offload is on (FLUXCPP_COPY_OFFLOAD).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

#include "comm/parts.hpp"
#include "deadline.hpp"
#include "error_util.hpp"

namespace fluxcpp::ops {

class Offload {
 public:
  // The copies use the last comm stream (with several streams, the others stay free for other
  // tasks).
  explicit Offload(const comm::Parts& c) : c_(c) {}
  Offload(const Offload&) = delete;
  Offload& operator=(const Offload&) = delete;
  // If the caller leaves early the task is told to stop (every wait inside it passes stop())
  // and joined: it touches the caller's buffers and stack, so it must not outlive the scope.
  ~Offload() {
    if (ticket_ == 0) return;
    stop_.store(true);
    join(ticket_);
  }

  void start(std::function<void()> task) { ticket_ = stream().enqueue(std::move(task)); }
  // Waits for the task; rethrows its error. If it has not finished by the deadline it is told
  // to stop, joined, and the call fails with kTimeout.
  void finish() {
    const uint64_t t = ticket_;
    if (t == 0) return;
    bool done = false;
    try {
      done = stream().wait(t, deadline_add(c_.runtime().deadline(), std::chrono::seconds(5)));
    } catch (...) {
      ticket_ = 0;
      throw;
    }
    ticket_ = 0;
    if (!done) {
      stop_.store(true);
      join(t);
      raise(Errc::kTimeout, "copy stream did not finish (rank {})", c_.topo().world_rank());
    }
  }
  // For waits inside the task: true once the caller gave up.
  const std::atomic<bool>* stop() const { return &stop_; }

 private:
  comm::Stream& stream() { return c_.runtime().comm_stream(c_.runtime().num_comm_streams() - 1); }
  // Without a time limit: once told to stop, the task ends within one of its own waits.
  void join(uint64_t t) noexcept {
    try {
      stream().wait(t, std::chrono::steady_clock::time_point::max());
    } catch (...) {
    }
  }

  const comm::Parts& c_;
  uint64_t ticket_ = 0;
  std::atomic<bool> stop_{false};
};

}  // namespace fluxcpp::ops
