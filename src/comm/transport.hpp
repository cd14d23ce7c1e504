// Transport: one op's point-to-point traffic between hosts, over the context's network
// (comm/network.hpp, chosen once when the context is made: MPI for a context made from MPI, gloo's
// TCP transport for one made from a store; the ops see only this interface).
//
// A call posts a batch of transfers. Each moves `bytes` between this rank's memory and one peer
// as messages of at most chunk_bytes() with one tag (MPI keeps their order), so a consumer can
// start on a prefix: a receive raises its `landed` signal to base + the bytes that have arrived,
// and a send posts each chunk once its `ready` signal shows that the producer has written it
// (ready >= base + the chunk's end). Signals count bytes cumulatively over the calls, so their
// values never repeat and no epoch has to be packed into them.
//
// Progress: MPI moves data only inside MPI calls (gloo moves it on its own I/O thread). progress() never blocks and may be called from
// any thread (a concurrent caller returns at once): the compute side calls it between GEMM tiles,
// waits call it while they wait, complete() drives it flat out when nothing else is left to do.
//
// Errors belong to the transport: a failed network call, a deadline passed in complete(), or
// abandon() put it in the failed state, abandon what is in flight and keep the first error;
// raise_if_failed() rethrows it to whoever asks (a consumer waiting on a landed signal checks it,
// so nobody waits for bytes that will never come). Memory that an abandoned transfer may still
// touch must stay mapped: poisoned() says so, and the owner then keeps it for good.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fluxcpp/error.hpp"
#include "shm/signal.hpp"

namespace fluxcpp::comm {

class Parts;

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

  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // The message size between hosts (at least 4 KiB; a network may cap it).
  std::size_t chunk_bytes() const { return chunk_; }
  // Starts this call's transfers (the previous batch must be complete). Zero-byte transfers are
  // skipped: both sides agree on every size, so neither waits for them.
  virtual void post(std::vector<Transfer> batch) = 0;
  // Posts sends that became ready, tests what is in flight, publishes landed bytes. Returns true
  // when the batch is complete (or failed). Never throws, never blocks.
  virtual bool progress() noexcept = 0;
  virtual bool idle() const = 0;
  // For comm::wait_driving: transfers in flight that move only while this rank drives them.
  virtual bool busy() const { return !idle(); }
  // True when a transfer may point into the caller's own memory (a user's input or output):
  // once abandon() returns, nothing of a batch touches its buffers again, whatever the peers do
  // later. The TCP channel closes its pairs on an abandon in flight; MPI cannot take back a
  // posted send, so its transfers stay in the op's segments, which a poisoned op keeps mapped.
  virtual bool takes_user_memory() const { return false; }
  // Drives progress until the batch is complete. On a deadline the transport fails with kTimeout
  // naming the peer and the bytes still missing; raises the transport's error if it failed.
  virtual void complete(Deadline deadline) = 0;
  // Rethrows the error that failed the transport, if any.
  virtual void raise_if_failed() const = 0;
  virtual bool failed() const = 0;
  // Abandons the batch (cancels receives, gives sends a grace period) and fails the transport
  // with `why` unless it already failed. noexcept: used on error paths and in destructors.
  virtual void abandon(const Error& why) noexcept = 0;
  // True if an abandoned transfer may still touch its buffer.
  bool poisoned() const { return poisoned_; }

 protected:
  // Op `op`'s transfers on the context's network, in messages of chunk_bytes (at least 4 KiB).
  Transport(const Parts& ctx, const char* op, std::size_t chunk_bytes);

  // The text of the kTimeout at complete()'s deadline: the first transfer still short (`late`,
  // `have` of its bytes moved; `unproduced`: a send whose rest this rank had not produced), or,
  // with none, the batch. `network` names the wire ("MPI", "TCP").
  std::string timeout_text(const char* network, const Transfer* late, std::size_t have,
                           bool unproduced) const;

  const Parts* ctx_ = nullptr;
  std::string op_;
  std::size_t chunk_ = 0;
  bool poisoned_ = false;  // set by a network's abandon()
};

// The context's network's transport for op `op` (Network::transport): collective over the
// context (the MPI one duplicates a communicator).
std::unique_ptr<Transport> make_transport(const Parts& ctx, const char* op,
                                          std::size_t chunk_bytes);

}  // namespace fluxcpp::comm
