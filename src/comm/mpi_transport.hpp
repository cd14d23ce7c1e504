// MpiTransport: comm/transport.hpp's Transport over MPI, on a communicator of the op's own.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/transport.hpp"
#include "fluxcpp/error.hpp"
#include "process_owner.hpp"
#include "shm/signal.hpp"

namespace fluxcpp::comm {

class Parts;

class MpiTransport : public Transport {
 public:
  // Collective over the context: a communicator of its own (a duplicate of `base`, the
  // context's), so no other op or the caller can match its messages.
  MpiTransport(const Parts& ctx, MPI_Comm base, const char* op, std::size_t chunk_bytes);
  ~MpiTransport() override;

  // Starts this call's transfers (the previous batch must be complete). Zero-byte transfers are
  // skipped: both sides agree on every size, so neither waits for them.
  void post(std::vector<Transfer> batch) override;
  // Posts sends that became ready, tests what is in flight, publishes landed bytes. Returns true
  // when the batch is complete (or failed). Never throws, never blocks.
  bool progress() noexcept override;
  bool idle() const override { return pending_.load(std::memory_order_acquire) == 0; }
  // Drives progress until the batch is complete. On a deadline the transport fails with kTimeout
  // naming the peer and the bytes still missing; raises the transport's error if it failed.
  void complete(Deadline deadline) override;
  // Rethrows the error that failed the transport, if any.
  void raise_if_failed() const override;
  bool failed() const override { return failed_.load(std::memory_order_acquire); }
  // Abandons the batch (cancels receives, gives sends a grace period) and fails the transport
  // with `why` unless it already failed. noexcept: used on error paths and in destructors.
  void abandon(const Error& why) noexcept override;

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

  MPI_Comm comm_ = MPI_COMM_NULL;
  ProcessOwner creator_;  // the destructor does nothing in a fork's copy
  mutable std::mutex mu_;
  std::vector<Stream> streams_;                     // guarded by mu_
  std::vector<MPI_Request> reqs_;                   // guarded by mu_
  std::vector<std::pair<int, std::size_t>> owner_;  // (stream, message) of each request
  std::atomic<std::size_t> pending_{0};             // messages not yet completed in this batch
  std::atomic<bool> failed_{false};
  std::unique_ptr<Error> error_;  // guarded by mu_; set once
};

}  // namespace fluxcpp::comm
