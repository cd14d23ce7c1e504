// The all-to-all pattern, shared by All2AllSingle, a2a_gemm, the Ulysses ops and the MoE ops: a
// block from every rank to every rank, with sizes and offsets agreed per call. A rank writes its
// block for rank t into its "a2a-out" slot at an offset; within a host, t reads it there; across
// hosts, the network carries it into t's "a2a-in" slot. to(t) and from(s) hide which is which, and
// targets() and sources() hand an op its peers in schedule order (Links::send and receive):
// blocks go out to other hosts' ranks first, then to this host's; they come in from this host's
// ranks first, then from other hosts'.
#pragma once

#include <functional>
#include <vector>

#include "ops/core/links.hpp"
#include "ops/core/mailbox.hpp"

namespace fluxcpp::ops {

class SingleCopy;

class A2aExchange {
 public:
  // Sizes and offsets of one call, the same functions on every rank (derived from agreed shapes
  // or the handshake's vectors).
  struct Plan {
    std::function<std::size_t(int s, int t)> bytes;       // what rank s sends rank t
    std::function<std::size_t(int s, int t)> out_offset;  // where, in s's a2a-out slot
    std::function<std::size_t(int s)> in_offset;          // where, in this rank's a2a-in slot
  };
  // Host peers may read each other's blocks straight out of their inputs (a single copy), when
  // `copy` is usable and the copy engine picks it for this call. input(q): host rank q's input
  // (laid out like its out slot), agreed in the handshake; 0 when its input is its out slot (the
  // zero-copy buffer, written before the call).
  struct Pull {
    SingleCopy* copy = nullptr;
    std::function<uint64_t(int q)> input;
  };
  // The caller's own buffers, for the network's transfers: blocks for other hosts leave straight
  // from `send` (laid out like the out slot) and theirs land straight in `recv` (laid out like
  // the in slot), skipping the staging copy at each end: on a link whose TCP stack takes the
  // rank's core, those copies are time the link waits. Taken only where the transport allows
  // user memory (Transport::takes_user_memory); both null: the slots.
  struct Direct {
    const char* send = nullptr;
    char* recv = nullptr;
  };

  A2aExchange() = default;
  // Declares the regions before the core allocates: the out slot of `out_bytes` (only when
  // `needed`: a host peer or another host reads it, or the op computes into it) and, across
  // hosts, the in slot of `in_bytes`.
  // `links` must outlive the exchange (the op's table).
  A2aExchange(const Links& links, shm::Layout& layout, std::size_t out_bytes, std::size_t in_bytes,
              bool needed);

  // The peers to send to, other hosts' ranks first, each part in ring order from r+1.
  const std::vector<int>& targets() const { return links_->send(); }
  // The peers to receive from, this host's ranks first, each part in ring order from r-1.
  const std::vector<int>& sources() const { return links_->receive(); }

  // Starts a call: posts the transfers to and from other hosts' ranks (each send chunk goes once
  // this rank published it in to(t)). With `pull`, host peers' blocks may be single copies (see
  // Pull): then to(t) of a host peer is empty and from(s) reads its input.
  // With `direct`, to(t) of another host's rank is empty (its block leaves from direct.send) and
  // from(s) of one holds its block in direct.recv (Inbox::drain to that place only waits).
  void begin(OpCore& core, const Plan& plan, const Pull& pull, const Direct& direct);
  void begin(OpCore& core, const Plan& plan, const Pull& pull);
  void begin(OpCore& core, const Plan& plan);
  Outbox to(int t) const;
  Inbox from(int s) const;
  // take(from(s)) for every source, in the order of sources(); with single copies, the host peers
  // in SingleCopy::pull's order, which then waits until every host peer has read this rank's.
  void receive(const std::function<void(const Inbox&)>& take) const;
  // Rank s's block for this rank as the buffers hold it, without waiting or starting a call: for
  // local paths that compute on whatever the buffers hold.
  Inbox held(int s, const Plan& plan) const;
  char* out_slot() const { return out_.count() > 0 ? out_.at(links_->local()) : nullptr; }
  // The channels this rank's peers are on: some through shared memory (host peers), some over
  // the network (other hosts' ranks, whose blocks land in pieces).
  bool shm_peers() const { return links_->host_size() > 1; }
  bool networked() const { return links_->networked(); }

 private:
  // Whether this call's host peers read single copies (every rank decides the same from `plan`).
  bool single_copy(const Plan& plan, const Pull& pull) const;

  const Links* links_ = nullptr;
  OpCore* core_ = nullptr;
  shm::SlotArray out_, in_;
  shm::SignalArray out_ready_;  // [W] in the sender's segment, by destination
  shm::SignalArray in_landed_;  // [W] in the receiver's segment, by source
  std::vector<Tally> sent_, received_;
  std::vector<uint64_t> send_base_, recv_base_;
  std::vector<std::size_t> send_bytes_, send_off_, recv_bytes_, recv_off_;
  Pull pull_;      // this call's single copies (copy null: none)
  Direct direct_;  // this call's network buffers (null: the slots)
};

// Equal blocks of `blk` bytes: rank s's block for t at t * blk of its a2a-out slot, and at
// s * blk of the receiver's a2a-in slot.
A2aExchange::Plan equal_blocks(std::size_t blk);

// Blocks whose sizes vary by call (the MoE routing): rank s's blocks back to back in receiver
// order in its out slot, and the blocks for this rank back to back in sender order in its in
// slot. The plan reads the table, which must outlive the call.
class BlockTable {
 public:
  // Fills the table for W ranks from bytes(s, t), what s sends t; returns its plan.
  A2aExchange::Plan plan(int W, int me, const std::function<std::size_t(int s, int t)>& bytes);

 private:
  int W_ = 0;
  std::vector<std::size_t> bytes_, out_off_, in_off_;  // [W·W], [W·W], [W]
};

}  // namespace fluxcpp::ops
