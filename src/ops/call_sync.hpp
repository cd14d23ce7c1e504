// Per-call agreement of a collective op: every rank publishes its call descriptor (epoch,
// shape fields, whether its own arguments were valid) and checks everyone else's before any
// data moves. This turns "ranks passed different m" or "rank 2 passed a null pointer" into
// kInvalidArgument on every rank instead of a hang, and — because a rank only publishes call e
// after finishing call e-1 — it also tells a rank that every peer is done with the previous
// call's buffers. Within a host it costs one cache line per peer; across hosts one small
// MPI_Iallgather among the rail peers.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <string>

#include "comm/context_impl.hpp"
#include "shm/signal.hpp"

namespace fluxcpp::ops {

inline constexpr int kSyncFields = 4;
using SyncFields = std::array<int64_t, kSyncFields>;

// Control lines every op keeps at the start of its symmetric segment.
struct SyncBlock {
  shm::Signal header[2];  // by epoch parity; payload: ok flag, fields, reporting rank
  char message[2][256];   // the rank's own argument error, if any
};

class CallSync {
 public:
  CallSync() = default;
  // blocks[i]: the SyncBlock of node rank i (i == node_rank is our own). rail: a communicator
  // over the rail peers (MPI_COMM_NULL on one host).
  CallSync(detail::ContextImpl* ctx, const char* op, std::vector<SyncBlock*> blocks, MPI_Comm rail,
           std::array<const char*, kSyncFields> field_names);

  // Collective. local_error is empty when this rank's arguments are valid. Throws
  // kInvalidArgument on every rank if any rank's arguments are invalid or fields differ, and
  // kTimeout naming the peer that did not arrive.
  // `extra` is a per-rank value published with the header (not compared); read it back with
  // extra() after exchange returned.
  void exchange(uint64_t epoch, const SyncFields& fields, const std::string& local_error,
                uint64_t extra = 0);

  // Node rank q's `extra` of call `epoch`; stable until this rank's next exchange returns.
  uint64_t extra(int q, uint64_t epoch) const { return blocks_[q]->header[epoch & 1].payload[5]; }

 private:
  detail::ContextImpl* ctx_ = nullptr;
  const char* op_ = "";
  std::vector<SyncBlock*> blocks_;
  MPI_Comm rail_ = MPI_COMM_NULL;
  std::array<const char*, kSyncFields> names_{};
};

// "op: timed out after T s waiting for rank R (host H, local rank L) on SIGNAL: expected >= X,
// observed Y (this is rank M)", as an Error(kTimeout).
[[noreturn]] void raise_timeout(detail::ContextImpl& ctx, const char* op, int peer_world_rank,
                                const std::string& signal, uint64_t expected, uint64_t observed);

}  // namespace fluxcpp::ops
