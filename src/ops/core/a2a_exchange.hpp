// The all-to-all pattern, shared by All2AllSingle, a2a_gemm and the Ulysses ops: a block from every
// rank to every rank, with sizes and offsets agreed per call. A rank writes its block for rank t
// into its "a2a-out" slot at an offset; within a host, t reads it there; across hosts, MPI
// carries it into t's "a2a-in" slot. to(t) and from(s) hide which is which. The order of the
// peers is OpCore::peers()'s (ops/core/peer_order.hpp); an op still visits host peers and other
// hosts' ranks in separate passes where it treats them differently.
#pragma once

#include <functional>
#include <vector>

#include "ops/core/mailbox.hpp"

namespace fluxcpp::ops {

class A2aExchange {
 public:
  // Sizes and offsets of one call, the same functions on every rank (derived from agreed shapes
  // or the handshake's vectors).
  struct Plan {
    std::function<std::size_t(int s, int t)> bytes;       // what rank s sends rank t
    std::function<std::size_t(int s, int t)> out_offset;  // where, in s's a2a-out slot
    std::function<std::size_t(int s)> in_offset;          // where, in this rank's a2a-in slot
  };

  A2aExchange() = default;
  // Declares the regions before the core allocates: the out slot of `out_bytes` (only when
  // `needed`: a host peer or another host reads it, or the op computes into it) and, across
  // hosts, the in slot of `in_bytes`.
  A2aExchange(detail::ContextImpl& c, shm::Layout& layout, std::size_t out_bytes,
              std::size_t in_bytes, bool needed);

  // Starts a call: posts the transfers to and from other hosts' ranks (each send chunk goes once
  // this rank published it in to(t)).
  void begin(OpCore& core, const Plan& plan);
  Outbox to(int t) const;
  Inbox from(int s) const;
  // Where rank s's block for this rank is read, without waiting or starting a call: for local
  // paths that compute on whatever the buffers hold.
  const char* data_of(int s, const Plan& plan) const;
  char* out_slot() const { return out_.count() > 0 ? out_.at(c_->node_rank()) : nullptr; }

 private:
  detail::ContextImpl* c_ = nullptr;
  OpCore* core_ = nullptr;
  shm::SlotArray out_, in_;
  shm::SignalArray out_ready_;  // [W] in the sender's segment, by destination
  shm::SignalArray in_landed_;  // [W] in the receiver's segment, by source
  std::vector<Tally> sent_, received_;
  std::vector<uint64_t> send_base_, recv_base_;
  std::vector<std::size_t> send_bytes_, send_off_, recv_bytes_, recv_off_;
};

}  // namespace fluxcpp::ops
