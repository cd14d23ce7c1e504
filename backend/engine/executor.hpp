// The group's stream: calls run one at a time, in the order they were submitted, on the group's
// worker thread, so that an async_op returns at once and the call progresses while Python
// computes. A thread that waits for a call and finds the worker idle runs the queue up to that
// call itself (a blocking call then costs no thread handoff). The worker is not woken per call:
// it looks for calls every 250 us, half as often after each look that finds calls came and their
// callers ran them all (down to every 4 ms), every 250 us again once it runs a call itself, and
// sleeps until woken after 100 ms without calls; it leaves a call younger than 50 us to its
// caller. An async call starts within a look: within 4 ms after a stretch of blocking calls.
// Point-to-point transfers are parked and advanced between calls without blocking, so
// collectives overtake them as they may.
// A call that fails with a timeout or a transport error breaks the group: every later call
// fails with that first error (the library's ops are unusable after a timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mailbox.hpp"

namespace fluxcpp::backend {

struct Task {
  const char* name = "";                    // the torch call, for errors
  std::function<void()> run;                // a blocking call (collective)
  std::optional<Mailbox::Transfer> transfer;  // or a point-to-point transfer
  // Called once when the task is over (error null: success). `waiter` true: on the thread that
  // waited for it (help()), after exec_ is released. false: on the worker (or in stop()) with
  // exec_ held (never mu_), so it must not block: whatever may (a Future's callbacks) goes
  // elsewhere.
  std::function<void(std::exception_ptr, bool waiter)> done;
  std::atomic<bool> finished{false};
  std::chrono::steady_clock::time_point submitted;
};

class Executor {
 public:
  explicit Executor(Mailbox* mailbox);
  ~Executor();  // stop()
  void submit(std::shared_ptr<Task> task);
  // Runs the queue up to and including `task` on this thread if no other thread is running a
  // call; returns without waiting otherwise. For a transfer, advances the parked transfers on
  // this thread until it is over, letting go of the group between steps.
  void help(const std::shared_ptr<Task>& task);
  // Ends the worker, then finishes on this thread what was submitted (parked transfers until
  // they complete or reach their deadline). help() does nothing from then on. Idempotent.
  void stop();
  // The first error that broke the group ("" while it is whole).
  std::string broken() const;

 private:
  void loop();
  // With exec_ held: pops and runs queued tasks (all, or up to `until`); advances parked
  // transfers once. Returns whether anything moved.
  bool drain(const Task* until);
  bool advance_transfers();
  // One try of help(): whether anything moved.
  bool help_once(const std::shared_ptr<Task>& task);
  void complete(const std::shared_ptr<Task>& t, std::exception_ptr e);
  static void finish(Task& t, std::exception_ptr e, bool waiter);

  Mailbox* mailbox_;
  std::mutex exec_;  // held by the thread that uses the context
  mutable std::mutex mu_;  // guards queue_, stopping_, broken_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  std::vector<std::shared_ptr<Task>> parked_;  // guarded by exec_
  std::atomic<std::size_t> parked_count_{0};   // parked_.size(), for the worker's sleep
  // While help() drains: the tasks it completed, whose done() it calls once exec_ is released.
  std::vector<std::pair<std::shared_ptr<Task>, std::exception_ptr>>* deferred_ = nullptr;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_submit_;  // guarded by mu_
  uint64_t submits_ = 0;  // calls submitted so far; guarded by mu_
  bool asleep_ = false;  // the worker waits without polling: submit() must wake it
  std::string broken_;
  std::thread worker_;
};

}  // namespace fluxcpp::backend
