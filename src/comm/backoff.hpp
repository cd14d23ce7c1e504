// Backoff: how a polling loop waits between checks when it cannot sleep on a futex because it
// must call something (MPI) to make progress. One shape for every such loop: spin with `pause`
// for a while, then yield the core, then take naps that double up to a cap. The loops differ only
// in the numbers (how long a peer is usually close, how long a nap may leave a link idle); their
// policies are named here, side by side. shm::signal_wait has its own three phases (spin, yield,
// futex): it can sleep until it is woken.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include "shm/signal.hpp"

namespace fluxcpp::comm {

struct BackoffPolicy {
  std::chrono::nanoseconds spin{0};         // `pause` from the start
  std::chrono::nanoseconds yield{0};        // then sched_yield until spin + yield
  std::chrono::nanoseconds nap{1'000};      // then naps of this length,
  std::chrono::nanoseconds max_nap{1'000};  // doubling up to this one
  int naps_per_step = 8;                    // naps of each length before it doubles
};

// Waiting on our own transfers (ops' signal waits while MPI messages are in flight): yield for
// 50 us, then naps of 1 us growing to 64 us (a socket drained for longer would idle the link).
inline constexpr BackoffPolicy kTransportWait{{},
                                              std::chrono::microseconds(50),
                                              std::chrono::microseconds(1),
                                              std::chrono::microseconds(64),
                                              8};
// Completing a batch with nothing else to do: yield for 100 us after the last completion (a
// peer's data is usually close; the caller resets the backoff on progress), then naps growing to
// 256 us so an oversubscribed host keeps its cores for the ranks that compute.
inline constexpr BackoffPolicy kTransportComplete{{},
                                                  std::chrono::microseconds(100),
                                                  std::chrono::microseconds(1),
                                                  std::chrono::microseconds(256),
                                                  8};
// Bounded collectives and check-ins (create, destroy): peers usually arrive within microseconds;
// after 200 us naps growing to 128 us, so a rank waiting for a late peer does not take its core.
inline constexpr BackoffPolicy kCollective{{},
                                           std::chrono::microseconds(200),
                                           std::chrono::microseconds(1),
                                           std::chrono::microseconds(128),
                                           16};
// Driving abandoned collectives (orphans.hpp) at a destroy or in MPI_Finalize: late by
// definition, so naps from the start, growing to 128 us.
inline constexpr BackoffPolicy kOrphans{
    {}, {}, std::chrono::microseconds(1), std::chrono::microseconds(128), 16};
// Point-to-point messages (AsyncSendRecv across hosts): the context's spin and yield budgets, as
// its signal waits, then 20 us naps (MPI progress needs polling, not a futex).
inline constexpr BackoffPolicy point_to_point(const shm::WaitPolicy& w) {
  return {w.spin, w.yield, std::chrono::microseconds(20), std::chrono::microseconds(20), 8};
}

// A forward waiting for its peers on other hosts, who run the same work (the call handshake on
// the rail, which at decode sizes carries the data): MPI needs polling, and a nap makes the
// message wait for an idle core's wake-up (measured: 0.2-0.3 ms of a 2 ms gemm_ar across hosts
// at hidden 4096, where MPI_Allreduce polls). With a core of its own (the context spins:
// w.spin > 0) a rank polls with sched_yield for up to 5 ms, as MPI's own waits poll, since peers
// running the same GEMM are late by a fraction of it; then naps. Oversubscribed (no spin), it
// keeps the context's yield budget, so the ranks that compute get the cores.
inline BackoffPolicy peer_wait(const shm::WaitPolicy& w) {
  constexpr std::chrono::nanoseconds kOwnCoreYield = std::chrono::milliseconds(5);
  return {w.spin, w.spin.count() > 0 ? std::max(w.yield, kOwnCoreYield) : w.yield,
          std::chrono::microseconds(1), std::chrono::microseconds(128), 16};
}

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Backoff(const BackoffPolicy& policy, Clock::time_point now = Clock::now())
      : policy_(policy), start_(now), nap_(policy.nap) {}

  // One wait between two checks; `now` is the caller's clock reading (saves one).
  void pause(Clock::time_point now = Clock::now()) {
    const auto waited = now - start_;
    if (waited < policy_.spin) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (waited < policy_.spin + policy_.yield) {
      sched_yield();
    } else {
      const auto ns = nap_.count();
      timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      nanosleep(&ts, nullptr);
      if (nap_ < policy_.max_nap && ++naps_ == policy_.naps_per_step) {
        nap_ = std::min(2 * nap_, policy_.max_nap);
        naps_ = 0;
      }
    }
  }

  // Something moved: start over (spin and yield again, then the shortest naps).
  void reset(Clock::time_point now = Clock::now()) {
    start_ = now;
    nap_ = policy_.nap;
    naps_ = 0;
  }

 private:
  BackoffPolicy policy_;
  Clock::time_point start_;
  std::chrono::nanoseconds nap_;
  int naps_ = 0;
};

}  // namespace fluxcpp::comm
