// Transport: one op's point-to-point traffic between hosts, over MPI.
//
// A call posts a batch of transfers. Each moves `bytes` between this rank's memory and one peer
// as messages of at most chunk_bytes() with one tag (MPI keeps their order), so a consumer can
// start on a prefix: a receive raises its `landed` signal to base + the bytes that have arrived,
// and a send posts each chunk once its `ready` signal shows that the producer has written it
// (ready >= base + the chunk's end). Signals count bytes cumulatively over the calls, so their
// values never repeat and no epoch has to be packed into them.
//
// Progress: MPI moves data only inside MPI calls. progress() never blocks and may be called from
// any thread (a concurrent caller returns at once): the compute side calls it between GEMM tiles,
// waits call it while they wait, complete() drives it flat out when nothing else is left to do.
//
// Errors belong to the transport: a failed MPI call, a deadline passed in complete(), or
// abandon() put it in the failed state, abandon what is in flight and keep the first error;
// raise_if_failed() rethrows it to whoever asks (a consumer waiting on a landed signal checks it,
// so nobody waits for bytes that will never come). Memory that an abandoned transfer may still
// touch must stay mapped: poisoned() says so, and the owner then keeps it for good.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fluxcpp/error.hpp"
#include "process_owner.hpp"
#include "shm/signal.hpp"

namespace fluxcpp::detail {
class ContextImpl;
}

namespace fluxcpp::comm {

using Deadline = std::chrono::steady_clock::time_point;

class Transport {
 public:
  struct Transfer {
    bool send = false;
    int peer = 0;  // world rank of the context
    int tag = 0;   // distinguishes transfers between the same pair within one call
    char* buf = nullptr;
    std::size_t bytes = 0;
    // send: ready signal (null: everything is ready now); recv: landed signal (may be null).
    shm::Signal* signal = nullptr;
    uint64_t base = 0;  // the signal's value before this transfer's first byte
    // Message size (0: chunk_bytes()); both sides of a transfer must pass the same. Smaller
    // messages let a consumer start sooner on a block that is produced piece by piece.
    std::size_t chunk = 0;
  };

  Transport() = default;
  // Collective over the context: a communicator of its own (MPI_Comm_dup), so no other op or
  // the caller can match its messages.
  Transport(detail::ContextImpl& ctx, const char* op, std::size_t chunk_bytes);
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  ~Transport();

  std::size_t chunk_bytes() const { return chunk_; }

  // Starts this call's transfers (the previous batch must be complete). Zero-byte transfers are
  // skipped: both sides agree on every size, so neither waits for them.
  void post(std::vector<Transfer> batch);
  // Posts sends that became ready, tests what is in flight, publishes landed bytes. Returns true
  // when the batch is complete (or failed). Never throws, never blocks.
  bool progress() noexcept;
  bool idle() const { return pending_.load(std::memory_order_acquire) == 0; }
  bool busy() const { return !idle(); }  // for comm::wait_driving
  // Drives progress until the batch is complete. On a deadline the transport fails with kTimeout
  // naming the peer and the bytes still missing; raises the transport's error if it failed.
  void complete(Deadline deadline);
  // Rethrows the error that failed the transport, if any.
  void raise_if_failed() const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Abandons the batch (cancels receives, gives sends a grace period) and fails the transport
  // with `why` unless it already failed. noexcept: used on error paths and in destructors.
  void abandon(const Error& why) noexcept;
  // True if an abandoned transfer may still touch its buffer.
  bool poisoned() const { return poisoned_; }

 private:
  struct Stream {
    Transfer t;
    std::size_t chunk = 0;     // message size
    std::size_t chunks = 0;    // messages in all
    std::size_t posted = 0;    // sends: messages posted so far
    std::size_t done = 0;      // messages completed
    std::vector<bool> landed;  // recv: which messages completed (they may finish out of order)
    std::size_t prefix = 0;    // recv: messages completed without a gap from the first
  };
  void fail_locked(Error e) noexcept;
  void abandon_locked() noexcept;
  std::string missing_locked() const;

  detail::ContextImpl* ctx_ = nullptr;
  std::string op_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  ProcessOwner creator_;  // the destructor does nothing in a fork's copy
  std::size_t chunk_ = 0;
  mutable std::mutex mu_;
  std::vector<Stream> streams_;                     // guarded by mu_
  std::vector<MPI_Request> reqs_;                   // guarded by mu_
  std::vector<std::pair<int, std::size_t>> owner_;  // (stream, message) of each request
  std::atomic<std::size_t> pending_{0};             // messages not yet completed in this batch
  std::atomic<bool> failed_{false};
  std::unique_ptr<Error> error_;  // guarded by mu_; set once
  bool poisoned_ = false;
};

}  // namespace fluxcpp::comm
