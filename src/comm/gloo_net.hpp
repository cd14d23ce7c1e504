// GlooNet: a context's network channel when it was not made from MPI: one gloo context (its TCP
// transport: a full mesh of pairs, each moved by gloo's own I/O thread) over every rank, built
// from the caller's key-value store. What rides on it: the control plane across hosts
// (GlooGroup), the ops' transfers (GlooTransport) and the call handshake's rail (RecordSwap).
//
// Slots are gloo's tags: a pair matches sends and receives per slot, in order. Each op takes the
// slots of its create serial (the same on every rank: ops are created collectively, in order);
// the control plane takes the next control slot at each collective (ranks run them in order).
//
// Waiting: gloo has no test; its waits block, and a wait that times out closes every pair of
// this rank's context. Any failure (fail()) closes them too: the channel is then over for this
// rank, every later use is refused, and a peer waiting on this rank learns at once (its
// connection closed). Transfers are watched by waiter threads (waiters()) that block in gloo's
// waits and publish what landed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/kv_store.hpp"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace fluxcpp::comm {

using GlooBuffer = gloo::transport::UnboundBuffer;

// Threads that run blocking jobs (a transfer's gloo waits), as many as jobs run at once; idle
// ones wait for the next job.
class Waiters {
 public:
  ~Waiters();  // joins: every job must have returned (aborted waits return)
  void run(std::function<void()> job);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
};

class GlooNet {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  // Collective over the world: every rank connects to every other, through `store` under
  // `prefix`. The interface: FLUXCPP_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME) names it; else, when
  // the ranks span several machines, the default route's; else the address this host's name
  // resolves to, else the loopback (kInvalidUsage when that is all there is for several
  // machines). kTimeout when some rank does not connect by `deadline`, kSystem when gloo fails.
  GlooNet(const KvStore& store, const std::string& prefix, int rank, int size, Deadline deadline,
          bool several_machines);
  ~GlooNet();
  GlooNet(const GlooNet&) = delete;
  GlooNet& operator=(const GlooNet&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::unique_ptr<GlooBuffer> buffer(void* ptr, std::size_t bytes);
  // The slot of an op's traffic: its create serial, a kind (kTransportSlot, kRailSlot, ...) and a
  // tag within it.
  static uint64_t op_slot(uint64_t serial, int kind, uint32_t tag) {
    return (serial << 36) | (static_cast<uint64_t>(kind) << 32) | tag;
  }
  static constexpr int kTransportSlot = 1, kRailSlot = 2, kRailTextSlot = 3;
  // The next slot of the control plane (the same sequence on every rank).
  uint64_t next_control_slot() { return (uint64_t{1} << 63) | control_++; }

  // Blocking waits on a buffer's next completion until `deadline` (the peer that completed in
  // *peer). false: aborted (abort_wait). Raises kTimeout at the deadline (the channel is then
  // closed, see above) and kSystem naming the gloo error when a pair failed; either marks the
  // channel failed.
  bool wait_recv(GlooBuffer& b, int* peer, Deadline deadline, const std::string& what);
  bool wait_send(GlooBuffer& b, Deadline deadline, const std::string& what);
  // Posting: gloo's send/recv, errors raised as kSystem (and the channel marked failed).
  void send(GlooBuffer& b, int peer, uint64_t slot, std::size_t off, std::size_t bytes);
  void recv(GlooBuffer& b, int peer, uint64_t slot, std::size_t off, std::size_t bytes);

  // The first failure of the channel ("" while it works); after one, every transfer fails.
  std::string failure() const;
  void fail(const std::string& why);
  Waiters& waiters() { return waiters_; }
  // Where this rank listens ("ip:port", for messages).
  const std::string& address() const { return address_; }

 private:
  [[noreturn]] void raise_gloo(const std::string& what, const std::string& gloo_error);
  // wait(timeout) bounded by `deadline`: kTimeout past it, kSystem when gloo fails (both close
  // the channel).
  template <class Wait>
  bool bounded_wait(Deadline deadline, const std::string& what, Wait&& wait);
  int rank_ = 0, size_ = 1;
  std::shared_ptr<gloo::Context> ctx_;
  uint64_t control_ = 0;
  mutable std::mutex mu_;
  std::string failure_;
  std::string address_;
  Waiters waiters_;
};

}  // namespace fluxcpp::comm
