// fluxcpp/async_send_recv.hpp: point-to-point messages between pipeline stages (FLUX
// AsyncSendRecv, DeepEP pp_send / pp_recv), within a host through shared memory, across hosts
// through MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fluxcpp/context.hpp"
#include "fluxcpp/export.h"
#include "fluxcpp/types.hpp"

namespace fluxcpp {

struct AsyncSendRecvOptions {
  int64_t max_m = 0;  // largest message, in rows (>= 0)
  int64_t n = 0;      // row length in elements (>= 1)
  DType dtype = DType::kFloat32;
  int num_slots = 1;  // messages in flight per ordered pair (>= 1)
  // The ranks this rank exchanges with; nullopt: the ring neighbours {r-1, r+1} mod W without r
  // and duplicates. Lists must be symmetric (b in a's list iff a in b's), checked at create.
  std::optional<std::vector<int>> peers;
};

namespace detail {
class AsyncSendRecvImpl;
}

// Messages s -> d are numbered q = 1, 2, ... (64-bit, never reset) and delivered in order;
// message q uses slot (q-1) % num_slots of the pair, which s fills only after d released message
// q - num_slots. Calls are point to point (not collective) and used by one thread at a time, like
// every op of a context. Errors are the caller's alone: a bad argument (kInvalidArgument) sends
// nothing and changes nothing; a wait beyond the context timeout is kTimeout naming the peer, the
// message number and the observed counter, and breaks that ordered pair only (its later calls:
// kInvalidUsage); other pairs go on.
class FLUXCPP_API AsyncSendRecv {
 public:
  // Collective: every rank passes the same max_m, n, dtype and num_slots and a symmetric peer
  // list; otherwise every rank throws kInvalidArgument naming the argument. Bounded by the
  // context timeout.
  AsyncSendRecv(const Context& ctx, const AsyncSendRecvOptions& options);
  AsyncSendRecv(AsyncSendRecv&&) noexcept;
  AsyncSendRecv& operator=(AsyncSendRecv&&) noexcept;
  ~AsyncSendRecv();  // noexcept; never communicates (messages in flight across hosts are leaked)

  // Blocks until the slot of the next message to `dst` is free, copies m rows of `data`
  // ([m, n], m <= max_m, m == 0 is a message) and publishes them. `data` is reusable on return;
  // does not wait for dst to receive. Returns the message number.
  uint64_t send(int dst, const void* data, int64_t m);
  // Blocks only until the slot is free; the copy runs on a comm stream. `data` must stay
  // untouched until send_wait(dst, seq) returns or send_test(dst, seq) says done.
  uint64_t isend(int dst, const void* data, int64_t m);
  // Waits until message `seq` to dst no longer reads the caller's data (kTimeout otherwise).
  void send_wait(int dst, uint64_t seq);
  // Non-blocking send_wait: true when message `seq` no longer reads the caller's data.
  bool send_test(int dst, uint64_t seq);
  // Non-blocking: true when the slot of the next message to dst is free (a send would not wait
  // for dst to release one).
  bool send_ready(int dst);
  // Blocks until the next message from `src`; if its row count exceeds out_rows,
  // kInvalidArgument and the message stays queued; otherwise copies it into `out` ([out_rows, n])
  // and returns its row count.
  int64_t recv(int src, void* out, int64_t out_rows);
  // Non-blocking: the row count of the next message from src, or -1 if none has arrived.
  int64_t probe(int src);

  // Collective teardown (bounded by the timeout): every rank calls it; messages sent but never
  // received are discarded. Local when the context is closed or broken. Idempotent.
  void close();

  const AsyncSendRecvOptions& options() const;
  // The peer list in use (the ring neighbours when options().peers is nullopt).
  const std::vector<int>& peers() const;

 private:
  std::unique_ptr<detail::AsyncSendRecvImpl> impl_;
};

}  // namespace fluxcpp
