// Streams: a worker thread draining a FIFO of tasks, the CPU stand-in for a CUDA stream.
// Created once per Context, never per call.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "shm/signal.hpp"

namespace fluxcpp::comm {

class Stream;

// A point in a stream's task order, like a CUDA event recorded on a stream: complete once every
// task queued before it has run.
struct Event {
  Stream* stream = nullptr;
  uint64_t ticket = 0;
  bool query() const;
  // See Stream::wait.
  bool wait(std::chrono::steady_clock::time_point deadline) const;
};

class Stream {
 public:
  // on_start runs first on the new thread (binding, naming).
  Stream(std::string name, shm::WaitPolicy policy, std::function<void()> on_start = {});
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();  // runs what is queued, then joins

  // Queues a task; returns its ticket (1, 2, ...). Thread-safe.
  uint64_t enqueue(std::function<void()> task);

  // Waits until every task with ticket <= t has run. Rethrows the exception task t threw, if any
  // (once; other tasks' errors belong to whoever waits on them). Returns false on timeout.
  bool wait(uint64_t ticket, std::chrono::steady_clock::time_point deadline);

  // An event for everything queued so far.
  Event record();

  uint64_t completed() const { return shm::signal_load(completed_); }
  const std::string& name() const { return name_; }

 private:
  void run(std::function<void()> on_start);

  std::string name_;
  shm::WaitPolicy policy_;
  std::mutex mu_;
  std::deque<std::function<void()>> queue_;
  uint64_t next_ticket_ = 0;  // guarded by mu_
  shm::Signal submitted_;
  shm::Signal completed_;
  std::map<uint64_t, std::exception_ptr> errors_;  // by ticket; guarded by mu_
  bool stop_ = false;                              // guarded by mu_
  std::thread thread_;
};

}  // namespace fluxcpp::comm
