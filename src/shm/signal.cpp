#include "shm/signal.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <climits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FLUXCPP_PAUSE() _mm_pause()
#else
#define FLUXCPP_PAUSE() __asm__ __volatile__("" ::: "memory")
#endif

namespace fluxcpp::shm {

namespace {

// Shared (not PRIVATE) futex ops: the word may live in memory mapped by several processes.
long futex_wait(const std::atomic<uint32_t>* addr, uint32_t expected, const timespec* rel) {
  return syscall(SYS_futex, reinterpret_cast<const uint32_t*>(addr), FUTEX_WAIT, expected, rel,
                 nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void wake(Signal& s) noexcept {
  // Pairs with the seq_cst increment of `waiters` in signal_wait: either the consumer sees the
  // new value before sleeping, or we see it waiting and wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (s.waiters.load(std::memory_order_seq_cst) != 0) {
    s.seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&s.seq);
  }
}

}  // namespace

void signal_set(Signal& s, uint64_t v) noexcept {
  s.value.store(v, std::memory_order_seq_cst);
  wake(s);
}

void signal_max(Signal& s, uint64_t v) noexcept {
  uint64_t cur = s.value.load(std::memory_order_relaxed);
  while (cur < v && !s.value.compare_exchange_weak(cur, v, std::memory_order_seq_cst)) {
  }
  wake(s);
}

bool signal_wait(const Signal& cs, uint64_t target, std::chrono::steady_clock::time_point deadline,
                 const WaitPolicy& policy, uint64_t* observed,
                 const std::atomic<bool>* abort) noexcept {
  auto& s = const_cast<Signal&>(cs);  // waiters/seq are bookkeeping, not the signal's value
  uint64_t v = s.value.load(std::memory_order_acquire);
  if (v >= target) return true;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  // Phase 1: spin. Phase 2: yield. Check the clock only every few rounds: it costs ~20 ns.
  for (int phase = 0; phase < 2; ++phase) {
    const auto budget = phase == 0 ? policy.spin : policy.yield;
    const auto until = std::min(start + (phase == 0 ? budget : policy.spin + budget), deadline);
    for (;;) {
      for (int i = 0; i < 32; ++i) {
        if (phase == 0) {
          FLUXCPP_PAUSE();
        } else {
          sched_yield();
        }
        v = s.value.load(std::memory_order_acquire);
        if (v >= target) return true;
      }
      if ((abort != nullptr && abort->load(std::memory_order_relaxed)) || clock::now() >= until)
        break;
    }
  }
  // Phase 3: sleep on the futex in slices, so that `abort` and the deadline are honoured.
  for (;;) {
    auto now = clock::now();
    if (now >= deadline || (abort != nullptr && abort->load(std::memory_order_relaxed))) {
      v = s.value.load(std::memory_order_acquire);
      if (observed != nullptr) *observed = v;
      return v >= target;
    }
    s.waiters.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seq = s.seq.load(std::memory_order_seq_cst);
    v = s.value.load(std::memory_order_seq_cst);
    if (v >= target) {
      s.waiters.fetch_sub(1, std::memory_order_seq_cst);
      return true;
    }
    auto slice = std::min<clock::duration>(deadline - now, std::chrono::milliseconds(50));
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
    timespec rel{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    futex_wait(&s.seq, seq, &rel);
    s.waiters.fetch_sub(1, std::memory_order_seq_cst);
    v = s.value.load(std::memory_order_acquire);
    if (v >= target) return true;
  }
}

}  // namespace fluxcpp::shm
