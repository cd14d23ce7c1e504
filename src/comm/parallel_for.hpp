// The fan-out of one piece of work over the context's compute workers, and the join.
#pragma once

#include <type_traits>

namespace fluxcpp::comm {

class Runtime;

// Runs fn(i) for every i in [0, n): fn(0) on the calling thread, fn(i) for i > 0 on compute
// worker i (worker 0 stays idle: the caller does its share), so n <= max(1, workers). Blocking:
// returns only once every task it queued has run, whatever failed (the tasks use the caller's
// memory), then rethrows the first error in index order (the caller's part first). No deadline:
// the tasks are local computations that end. n <= 1 runs fn(0) inline without touching a worker.
// Not re-entrant from a worker task (it would wait for itself).
template <class Fn>
void parallel_for(Runtime& rt, int n, Fn&& fn);

// The type-erased body (no allocation for the task itself beyond the stream's queue).
void parallel_for_erased(Runtime& rt, int n, void (*call)(void*, int), void* fn);

template <class Fn>
void parallel_for(Runtime& rt, int n, Fn&& fn) {
  using F = std::remove_reference_t<Fn>;
  if (n <= 0) return;
  if (n == 1) {
    fn(0);
    return;
  }
  parallel_for_erased(
      rt, n, [](void* f, int i) { (*static_cast<F*>(f))(i); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

}  // namespace fluxcpp::comm
