// Epoch signals: 64-bit monotonically increasing counters, one per cache line, usable across
// processes (in shared memory) and across threads. Producers store-release a larger value;
// consumers wait until the value reaches a target. Nothing is ever reset, so there is no ABA and
// no barrier is needed between calls.
//
// A wait spins (pause) for a while, then yields the core, then sleeps on a futex, so that a host
// running more threads than cores (4 ranks on a 2-core CI box) still lets the producer run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace fluxcpp::shm {

struct alignas(64) Signal {
  std::atomic<uint64_t> value{0};
  std::atomic<uint32_t> seq{0};      // futex word: bumped by a producer that saw sleepers
  std::atomic<uint32_t> waiters{0};  // consumers that may be asleep on `seq`
  // The rest of the line is free for a small payload published with the value (written before
  // set(), read after a successful wait).
  uint64_t payload[6];
};
static_assert(sizeof(Signal) == 64, "one signal per cache line");

struct WaitPolicy {
  std::chrono::nanoseconds spin{20'000};
  std::chrono::nanoseconds yield{200'000};
};

// Publishes v (callers keep values monotonic) and wakes sleepers. Release semantics: writes
// made before set() are visible to a consumer whose wait observed v.
void signal_set(Signal& s, uint64_t v) noexcept;

// Raises the value to at least v (atomic max) and wakes sleepers.
void signal_max(Signal& s, uint64_t v) noexcept;

// Waits until value >= target or until `deadline`. Acquire semantics. Returns true when
// reached; false on timeout, with the last observed value in *observed. `abort`, when given, is
// polled too: a true value ends the wait early (returns false).
bool signal_wait(const Signal& s, uint64_t target, std::chrono::steady_clock::time_point deadline,
                 const WaitPolicy& policy, uint64_t* observed = nullptr,
                 const std::atomic<bool>* abort = nullptr) noexcept;

inline uint64_t signal_load(const Signal& s) noexcept {
  return s.value.load(std::memory_order_acquire);
}

}  // namespace fluxcpp::shm
