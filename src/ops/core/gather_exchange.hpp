// The all-gather pattern, shared by AllGather and AGKernel: every rank's block goes to every rank.
// Within a host peers read a rank's block in its segment ("staged"). Across hosts a block travels
// once per host, between rail peers (the ranks with the same local rank), into "rail-in[host]" of
// the receiver's segment, where the receiver's host peers read it too. from(g) hides all of that:
// an op waits on each rank's Inbox the same way, in the order of others() (or of host_peers() and
// remote(), when it treats the two differently).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ops/core/mailbox.hpp"

namespace fluxcpp::ops {

class GatherExchange {
 public:
  GatherExchange() = default;
  // Declares the regions in `layout` before the core allocates it. `needed`: false when no peer
  // and no other host reads the blocks (then nothing is allocated and own() has no data).
  GatherExchange(detail::ContextImpl& c, shm::Layout& layout, std::size_t max_block, bool needed);

  // Starts a call moving `block` bytes per rank (the same on every rank): posts the transfers to
  // and from the rail peers; each send chunk goes once this rank has published it in own().
  // `chunk`: the size of the messages between hosts (0: the transport's), for a block that is
  // published piece by piece.
  void begin(OpCore& core, std::size_t block, std::size_t chunk = 0);
  // This rank's staged block: write it (or have the caller write it: zero-copy input), publish.
  Outbox own() const;
  // When other hosts read this rank's block (they receive it from its staged slot): writes
  // `input` there chunk by chunk, each published at once so the sends start early. True when
  // it did (the block is then staged).
  bool stage_for_hosts(const char* input, std::size_t block) const;
  // The other hosts' blocks into out + block * g, as they land.
  void drain_other_hosts(char* out, std::size_t block) const;
  // The host peers' blocks (ring order), to wait on and read.
  std::vector<Inbox> host_inboxes() const;
  // World rank g's block, g != this rank.
  Inbox from(int g) const;
  // The other ranks: host peers in ring order first, then each other host's ranks (in the
  // order their blocks reach this host).
  const std::vector<int>& others() const { return others_; }
  // others() split: the host peers, then the other hosts' ranks.
  const std::vector<int>& host_peers() const { return host_peers_; }
  const std::vector<int>& remote() const { return remote_; }
  // This host's world ranks (this one included) by local rank, and the same ranks as runs of
  // consecutive world ranks, (first, count) in world order: where the host's blocks sit together
  // in a buffer in world-rank order.
  const std::vector<int>& host() const { return host_; }
  const std::vector<std::pair<int, int64_t>>& host_runs() const { return host_runs_; }
  char* staged_slot() const { return needed_ ? staged_.at(c_->node_rank()) : nullptr; }
  // Where world rank g's block is read (g != this rank), without waiting: for local paths that
  // compute on whatever the buffers hold.
  const char* data_of(int g) const;

 private:
  detail::ContextImpl* c_ = nullptr;
  OpCore* core_ = nullptr;
  bool needed_ = false;
  shm::SlotArray staged_, rail_in_;
  shm::SignalArray staged_ready_, rail_landed_;
  Tally staged_tally_, rail_tally_;
  uint64_t staged_base_ = 0, rail_base_ = 0;
  std::size_t block_ = 0;
  std::vector<int> others_, host_peers_, remote_, host_;
  std::vector<std::pair<int, int64_t>> host_runs_;
};

}  // namespace fluxcpp::ops
