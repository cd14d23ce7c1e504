// Runtime: how a context runs its ops — the agreed config, the wait policy and the deadline
// rule, the comm streams and the compute workers. Made when the context is (its threads start
// then) and stopped when it is released. No MPI; not collective.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/config.hpp"
#include "comm/stream.hpp"
#include "deadline.hpp"
#include "shm/signal.hpp"

namespace fluxcpp::comm {

class Runtime {
 public:
  Runtime() = default;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime() { stop(); }

  // The config every rank agreed on, and the wait policy it sets.
  void configure(const Config& config);
  // Starts config().comm_threads comm streams and config().compute_threads compute workers,
  // bound as config().binding says.
  void start_threads();
  // Joins the threads (what a context's release does).
  void stop() noexcept;
  // Drops the threads without joining them: in a copy made by fork() they exist only in the
  // parent, and a thread there may have held a stream's lock when the copy was made.
  void abandon() noexcept;

  const Config& config() const { return config_; }
  shm::WaitPolicy wait_policy() const { return policy_; }
  // now() + timeout_s, saturated: an infinite or huge timeout gives time_point::max() (never).
  std::chrono::steady_clock::time_point deadline() const {
    return deadline_after(config_.timeout_s);
  }

  int num_comm_streams() const { return static_cast<int>(comm_streams_.size()); }
  Stream& comm_stream(int i) { return *comm_streams_[i]; }
  int num_compute_workers() const { return static_cast<int>(compute_.size()); }
  Stream& compute_worker(int i) { return *compute_[i]; }

 private:
  Config config_;
  shm::WaitPolicy policy_;
  std::vector<std::unique_ptr<Stream>> comm_streams_;
  std::vector<std::unique_ptr<Stream>> compute_;
};

}  // namespace fluxcpp::comm
