// A signal wait that drives this rank's MPI traffic while it waits. MPI moves data only inside
// MPI calls, so a thread that waits for bytes of its own transfers (or whose own sends need
// progress for a peer's data to come back) must keep calling into the transport; with nothing
// in flight it can sleep on the signal like any other wait. Used by the ops' waits on their
// transport (ops::OpCore::wait) and by AsyncSendRecv's waits on its point-to-point net.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "comm/backoff.hpp"
#include "deadline.hpp"
#include "shm/signal.hpp"

namespace fluxcpp::comm {

struct DriveWait {
  shm::WaitPolicy policy;  // the signal wait (spin, yield, futex) while nothing is in flight
  BackoffPolicy backoff;   // between polls while something is
  // With nothing in flight, sleep on the signal in slices of this length and look again (another
  // thread may post a transfer meanwhile); max(): until the deadline (nothing else posts).
  std::chrono::nanoseconds idle_slice = std::chrono::nanoseconds::max();
};

// Waits until `s` reaches `target`. `net` (comm::Transport, comm::P2pNet; null: none) provides
// busy() (transfers of this rank in flight), progress() (never blocks) and raise_if_failed().
// While it is busy: progress, check, back off; otherwise signal_wait. Returns true once reached;
// false at `deadline` or when `stop` is raised, with the last value seen in *observed. Rethrows
// the net's failure. The caller checks the signal first if it wants a fast path.
template <class Net>
bool wait_driving(Net* net, const shm::Signal& s, uint64_t target, SteadyTime deadline,
                  const DriveWait& how, uint64_t* observed,
                  const std::atomic<bool>* stop = nullptr) {
  if (net == nullptr) return shm::signal_wait(s, target, deadline, how.policy, observed, stop);
  using Clock = std::chrono::steady_clock;
  auto stopped = [stop] { return stop != nullptr && stop->load(std::memory_order_relaxed); };
  Backoff backoff(how.backoff);
  for (;;) {
    if (!net->busy()) {
      // Nothing of ours in flight: the signal comes from a host peer (or a transfer a host peer
      // drives); sleep on it the usual way.
      const SteadyTime until = how.idle_slice == std::chrono::nanoseconds::max()
                                   ? deadline
                                   : std::min(deadline, deadline_add(Clock::now(), how.idle_slice));
      if (shm::signal_wait(s, target, until, how.policy, observed, stop)) return true;
      if (stopped()) return false;
      net->raise_if_failed();
      if (until >= deadline) return false;
      continue;
    }
    net->progress();
    net->raise_if_failed();
    const uint64_t v = shm::signal_load(s);
    if (v >= target) return true;
    if (observed != nullptr) *observed = v;
    if (stopped()) return false;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    backoff.pause(now);
  }
}

}  // namespace fluxcpp::comm
