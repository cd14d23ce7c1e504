// Lifecycle: the state of a context over its life, apart from what it runs on — closed or
// broken, the process that created it, which thread is inside it, the op being created, and the
// host peers' processes. Local, no MPI; not thread-safe except try_enter/leave.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "process_owner.hpp"

namespace fluxcpp::comm {

class Topology;

class Lifecycle {
 public:
  Lifecycle() = default;
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  // Closed: the caller closed (or destroyed) the context; its resources are freed.
  void mark_closed() { closed_ = true; }
  bool closed() const { return closed_; }

  // Broken: a create or destroy failed midway (its communicator may hold an unmatched
  // collective); every later call on the context or its ops is kInvalidUsage naming `why`.
  void mark_broken(const std::string& why) {
    if (broken_.empty()) broken_ = why;
  }
  const std::string& broken() const { return broken_; }

  // kInvalidUsage when the context is closed or broken, or this process is a fork of the one
  // that created it (check_process).
  void check_usable(const char* what) const;
  // kInvalidUsage, naming both processes, when this process did not create the context (a copy
  // made by fork(): see process_owner.hpp).
  void check_process(const char* what) const;
  // True in the process that created the context.
  bool in_creator() const { return creator_.here(); }

  // Starts an op's collective create: the op's serial (part of every call's identity, the same
  // on every rank: ops are created collectively, in the same order) and its segments' tag.
  uint64_t begin_op_create(const char* op);
  const std::string& creating_tag() const { return creating_tag_; }
  uint64_t creating_serial() const { return op_serial_; }

  // One thread at a time: a call enters the context for its duration (re-entrant on the thread
  // inside: an op may use another). false: another thread is inside (its call goes on; this one
  // must fail with kInvalidUsage).
  bool try_enter() {
    const std::thread::id me = std::this_thread::get_id();
    std::thread::id none{};
    if (owner_.load(std::memory_order_acquire) == me) {
      ++depth_;
      return true;
    }
    if (!owner_.compare_exchange_strong(none, me, std::memory_order_acquire)) return false;
    depth_ = 1;
    return true;
  }
  void leave() {
    if (--depth_ == 0) owner_.store(std::thread::id{}, std::memory_order_release);
  }

  // The pid of every rank of this rank's host, by local rank (for gone_host_peers).
  void set_host_pids(std::vector<long> pids) { host_pids_ = std::move(pids); }
  // Host peers whose process has exited or is stopped, as "rank R (pid P) has exited" phrases
  // joined by "; " ("" when every host peer runs). What a collective that timed out cannot say
  // itself: who of the host is gone. Local (reads /proc); peers on other hosts are not covered.
  std::string gone_host_peers(const Topology& topo) const;

 private:
  bool closed_ = false;
  std::string broken_;
  ProcessOwner creator_;  // the process that created the context
  uint64_t op_serial_ = 0;
  std::string creating_tag_;
  std::atomic<std::thread::id> owner_{};
  int depth_ = 0;  // entries of the owning thread
  std::vector<long> host_pids_;
};

}  // namespace fluxcpp::comm
