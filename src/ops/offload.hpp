// Copy offload: the data movement of a fused op runs as one task on a comm stream while the
// calling thread computes (the CPU counterpart of a copy stream beside the GEMM kernel). Used
// when Config::copy_offload is on (FLUXCPP_COPY_OFFLOAD).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>

#include "comm/context_impl.hpp"
#include "error_util.hpp"

namespace fluxcpp::ops {

class Offload {
 public:
  // The copies use the last comm stream, so that with two or more the MPI transfers (stream 0)
  // and the copies proceed side by side.
  explicit Offload(detail::ContextImpl& c) : c_(c) {}
  Offload(const Offload&) = delete;
  Offload& operator=(const Offload&) = delete;
  // If the caller leaves early the task is told to stop (waits inside it pass stop()) and
  // waited for: it touches the caller's buffers.
  ~Offload() {
    if (ticket_ == 0) return;
    stop_.store(true);
    try {
      stream().wait(ticket_, c_.deadline());
    } catch (...) {
    }
  }

  void start(std::function<void()> task) { ticket_ = stream().enqueue(std::move(task)); }
  // Waits for the task; rethrows its error.
  void finish() {
    const uint64_t t = ticket_;
    ticket_ = 0;
    if (t != 0 && !stream().wait(t, c_.deadline() + std::chrono::seconds(5)))
      raise(Errc::kTimeout, "copy stream did not finish (rank {})", c_.world_rank());
  }
  // For waits inside the task: true once the caller gave up.
  const std::atomic<bool>* stop() const { return &stop_; }

 private:
  comm::Stream& stream() { return c_.comm_stream(c_.num_comm_streams() - 1); }

  detail::ContextImpl& c_;
  uint64_t ticket_ = 0;
  std::atomic<bool> stop_{false};
};

}  // namespace fluxcpp::ops
