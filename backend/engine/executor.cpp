// Executor: one worker thread per group, FIFO calls, parked transfers, caller help.
#include "executor.hpp"

#include <sys/prctl.h>

#include <chrono>

#include "capi_call.hpp"

namespace fluxcpp::backend {
namespace {

// How long the worker leaves a new call to its caller; how often it looks for calls (from kPoll,
// doubling after every look that found none it had to run, up to kPollMax); after how long
// without a submitted call it sleeps until woken (see loop()).
constexpr std::chrono::microseconds kGrace{50};
constexpr std::chrono::microseconds kPoll{250};
constexpr std::chrono::microseconds kPollMax{4000};
constexpr std::chrono::milliseconds kQuiet{100};

// Whether a failed call leaves the ranks out of step: every failure but an argument error,
// which the library raises on every rank alike (a rank-local failure, e.g. a context in use by
// another thread, leaves this rank a call behind its peers: later calls would pair wrongly).
bool breaks(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Failure& f) {
    return f.status() != FLUXCPP_ERROR_INVALID_ARGUMENT;
  } catch (...) {
    return true;
  }
}

std::string message(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

Executor::Executor(Mailbox* mailbox)
    : mailbox_(mailbox),
      worker_([this] {
        prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: the grace below is short
        loop();
      }) {}

Executor::~Executor() { stop(); }

void Executor::submit(std::shared_ptr<Task> task) {
  task->submitted = std::chrono::steady_clock::now();
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_submit_ = task->submitted;
    ++submits_;
    queue_.push_back(std::move(task));
    wake = asleep_ || stopping_;
  }
  if (wake) cv_.notify_one();
}

std::string Executor::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void Executor::complete(const std::shared_ptr<Task>& task, std::exception_ptr e) {
  Task& t = *task;
  if (e && !t.transfer && breaks(e)) {  // a transfer's failure is its pair's, not the group's
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.empty()) broken_ = message(e);
  }
  t.run = nullptr;  // with the tensors it holds
  if (deferred_ != nullptr) {  // help(): done() once exec_ is released
    deferred_->emplace_back(task, e);
    return;
  }
  finish(t, e, false);
}

void Executor::finish(Task& t, std::exception_ptr e, bool waiter) {
  // The Work holds the task and the task's done holds the Work: dropping done here ends that
  // cycle once the call is over.
  auto done = std::move(t.done);
  t.done = nullptr;
  t.finished.store(true, std::memory_order_release);
  if (done) done(e, waiter);
}

bool Executor::advance_transfers() {
  bool moved = false;
  for (std::size_t i = 0; i < parked_.size();) {
    Task& t = *parked_[i];
    bool blocked = false;  // an earlier transfer of the same direction and peer goes first
    for (std::size_t j = 0; j < i && !blocked; ++j)
      blocked = Mailbox::ordered(*parked_[j]->transfer, *t.transfer);
    std::exception_ptr err;
    bool finished = false;
    if (!blocked) {
      const int64_t before = t.transfer->done + (t.transfer->header_done ? 1 : 0);
      try {
        finished = mailbox_->step(*t.transfer);
      } catch (...) {
        err = std::current_exception();
      }
      moved |= finished || err || t.transfer->done + (t.transfer->header_done ? 1 : 0) != before;
    }
    if (finished || err) {
      auto keep = parked_[i];
      parked_.erase(parked_.begin() + static_cast<std::ptrdiff_t>(i));
      complete(keep, err);
    } else {
      ++i;
    }
  }
  return moved;
}

bool Executor::drain(const Task* until) {
  bool moved = false;
  for (;;) {
    std::shared_ptr<Task> t;
    std::string broken;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      t = std::move(queue_.front());
      queue_.pop_front();
      broken = broken_;
    }
    moved = true;
    if (!broken.empty() && !t->transfer) {
      complete(t, std::make_exception_ptr(Failure(
                       FLUXCPP_ERROR_INVALID_USAGE,
                       std::string("ProcessGroupFluxcpp::") + t->name +
                           ": the process group failed earlier and cannot be used: " + broken)));
    } else if (t->transfer) {
      parked_.push_back(t);
      parked_count_.store(parked_.size(), std::memory_order_release);
      std::lock_guard<std::mutex> lock(mu_);
      if (asleep_) cv_.notify_one();  // the worker advances it from now on
    } else {
      std::exception_ptr err;
      try {
        t->run();
      } catch (...) {
        err = std::current_exception();
      }
      complete(t, err);
    }
    if (t.get() == until) break;
  }
  if (!parked_.empty()) moved |= advance_transfers();
  parked_count_.store(parked_.size(), std::memory_order_release);
  return moved;
}

bool Executor::help_once(const std::shared_ptr<Task>& task) {
  std::unique_lock<std::mutex> exec(exec_, std::try_to_lock);
  if (!exec.owns_lock()) return false;
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;  // stop() finishes what is left
    for (const auto& q : queue_) queued |= q.get() == task.get();
  }
  if (!queued && !task->transfer) return false;  // running or done on the worker
  std::vector<std::pair<std::shared_ptr<Task>, std::exception_ptr>> done;
  deferred_ = &done;
  bool moved = true;
  if (queued)
    drain(task.get());  // a transfer is parked and advanced once
  else
    moved = advance_transfers();  // a parked transfer, once: never waiting here for its peer
  parked_count_.store(parked_.size(), std::memory_order_release);
  deferred_ = nullptr;
  exec.unlock();
  for (auto& [t, e] : done) finish(*t, e, true);
  return moved;
}

void Executor::help(const std::shared_ptr<Task>& task) {
  if (task->finished.load(std::memory_order_acquire)) return;
  if (!task->transfer) {
    help_once(task);
    return;
  }
  // A transfer: this thread would only wait, so it advances the parked transfers itself, a step
  // at a time, letting go of the group between steps (the worker may need to run a call the
  // peer waits for). Spin, then yield, then nap, as the library's waits do.
  int idle = 0;
  while (!task->finished.load(std::memory_order_acquire)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      if (!queue_.empty()) cv_.notify_one();  // calls behind: the worker takes them
    }
    idle = help_once(task) ? 0 : idle + 1;
    if (idle > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(idle > 1024 ? 200 : 20));
    else if (idle > 16)
      std::this_thread::yield();
  }
}

void Executor::loop() {
  int idle = 0;  // passes without progress while transfers are parked
  auto poll = std::chrono::duration_cast<std::chrono::steady_clock::duration>(kPoll);
  uint64_t seen = 0;  // submits_ at the last look
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool parked = parked_count_.load(std::memory_order_acquire) > 0;
      if (queue_.empty()) {
        if (stopping_) return;  // stop() finishes parked transfers
        if (parked) {
          if (idle >= 64)  // spin, then yield, then nap until a transfer can move
            cv_.wait_for(lock, std::chrono::microseconds(idle < 256 ? 20 : 200));
        } else if (std::chrono::steady_clock::now() - last_submit_ < kQuiet) {
          // Look for calls instead of being woken per call: a blocking call's caller runs its
          // call itself (help), and a call nobody waits for yet (async_op) starts within a
          // look. The looks grow sparse while callers run every call themselves: each costs
          // the compute of both ranks on a loaded machine (a timer and a context switch).
          cv_.wait_for(lock, poll);
          // Calls came and their callers ran them all: look less often. Nothing came: as often
          // as before (an async call after a pause starts as soon as after the last one).
          if (queue_.empty() && submits_ != seen)
            poll = std::min<std::chrono::steady_clock::duration>(2 * poll, kPollMax);
          seen = submits_;
          continue;
        } else {
          asleep_ = true;  // a long quiet: submit() (or a parked transfer) wakes this wait
          cv_.wait(lock, [this] {
            return !queue_.empty() || stopping_ ||
                   parked_count_.load(std::memory_order_acquire) > 0;
          });
          asleep_ = false;
        }
      }
      // Leave a call younger than the grace to its caller, which is about to wait() for it.
      if (!queue_.empty() && !stopping_) {
        const auto age = std::chrono::steady_clock::now() - queue_.front()->submitted;
        if (age < kGrace) {
          cv_.wait_for(lock, kGrace - age);
          continue;
        }
      }
    }
    bool moved;
    {
      std::lock_guard<std::mutex> exec(exec_);
      moved = drain(nullptr);
    }
    idle = parked_count_.load(std::memory_order_acquire) == 0 || moved ? 0 : idle + 1;
    if (moved) poll = kPoll;  // a call its caller left to the worker: look often again
    if (idle > 16 && idle < 64) std::this_thread::yield();
  }
}

void Executor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  // A thread in help() may still run calls: wait for it, then finish what it left (calls
  // submitted meanwhile run; parked transfers go on until they complete or time out).
  std::lock_guard<std::mutex> exec(exec_);
  drain(nullptr);
  while (!parked_.empty()) {
    if (!advance_transfers()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  parked_count_.store(0, std::memory_order_release);
}

}  // namespace fluxcpp::backend
