#include "comm/parallel_for.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <vector>

#include "comm/runtime.hpp"

namespace fluxcpp::comm {

void parallel_for_erased(Runtime& rt, int n, void (*call)(void*, int), void* fn) {
  struct Job {
    void (*call)(void*, int);
    void* fn;
  } job{call, fn};
  // Tickets on the stack for the usual worker counts.
  constexpr int kInline = 32;
  uint64_t inline_tickets[kInline];
  std::vector<uint64_t> heap_tickets;
  uint64_t* tickets = inline_tickets;
  int queued = 0;
  std::exception_ptr failed;
  try {
    if (n > kInline) {
      heap_tickets.resize(static_cast<std::size_t>(n));
      tickets = heap_tickets.data();
    }
    // A pointer and an index: small enough for std::function to hold without allocating.
    for (int i = 1; i < n; ++i) {
      const Job* j = &job;
      tickets[i] = rt.compute_worker(i).enqueue([j, i] { j->call(j->fn, i); });
      queued = i;
    }
    call(fn, 0);
  } catch (...) {
    failed = std::current_exception();
  }
  const auto forever = std::chrono::steady_clock::time_point::max();
  for (int i = 1; i <= queued; ++i) {
    try {
      rt.compute_worker(i).wait(tickets[i], forever);
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace fluxcpp::comm
