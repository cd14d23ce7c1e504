// The all-gather pattern, shared by AllGather and AGKernel: every rank's block goes to every rank.
// Within a host peers read a rank's block in its segment ("staged"). Across hosts a block travels
// once per host, between rail peers (the ranks with the same local rank), into "rail-in[host]" of
// the receiver's segment, where the receiver's host peers read it too. from(g) hides all of that:
// an op waits on each rank's Inbox the same way, in the order of others() (or gathers the host's
// blocks first and then treats networked(), the blocks still on the link).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ops/core/links.hpp"
#include "ops/core/mailbox.hpp"

namespace fluxcpp::ops {

class GatherExchange {
 public:
  // The caller's own buffers, for the network's transfers on hosts of one rank: this rank's block
  // leaves straight from `send` and rank g's lands straight at `recv` + block * g, skipping the
  // staging copy at each end (A2aExchange::Direct says why). Taken only where the transport
  // allows user memory and no host peer reads the blocks; both null: the slots.
  struct Direct {
    const char* send = nullptr;
    char* recv = nullptr;
  };

  GatherExchange() = default;
  // Declares the regions in `layout` before the core allocates it. `needed`: false when no peer
  // and no other host reads the blocks (then nothing is allocated and own() has no data).
  // `links` must outlive the exchange (the op's table).
  GatherExchange(const comm::Parts& c, const Links& links, shm::Layout& layout,
                 std::size_t max_block, bool needed);

  // Starts a call moving `block` bytes per rank (the same on every rank): posts the transfers to
  // and from the rail peers; each send chunk goes once this rank has published it in own().
  // `chunk`: the size of the messages between hosts (0: the transport's), for a block that is
  // published piece by piece.
  void begin(OpCore& core, std::size_t block, std::size_t chunk = 0);
  // With `direct` (see Direct): stage_for_hosts() stages nothing, and from(g) of another host's
  // rank holds its block at direct.recv + block * g (Inbox::drain to that place only waits).
  void begin(OpCore& core, std::size_t block, const Direct& direct);
  // This rank's staged block: write it (or have the caller write it: zero-copy input), publish.
  Outbox own() const;
  // Whether any rank reads this rank's block (a host peer or another host).
  bool read_by_others() const { return !others_.empty(); }
  // Publishes this rank's block: `input` written into own() in the channel's chunks, each
  // published at once so that host peers and the transport start on the first; or, zero-copy
  // (the caller wrote it there), published whole. Nothing when no rank reads it.
  void stage(const char* input, std::size_t block, bool zero_copy) const;
  // When other hosts read this rank's block (they receive it from its staged slot): writes
  // `input` there chunk by chunk, each published at once so the sends start early. True when
  // it did (the block is then staged).
  bool stage_for_hosts(const char* input, std::size_t block) const;
  // The host's blocks (this rank's from `own`, the host peers' as they land) into
  // out + block * g.
  void gather_host(char* out, const char* own, std::size_t block) const;
  // Every rank's block from the call's handshake payloads (the latency path: the blocks rode on
  // `core`'s handshake, on one host or across hosts of one rank each; no begin()), and this
  // rank's from `own`.
  void gather_payloads(const OpCore& core, char* out, const char* own, std::size_t block) const;
  // The other hosts' blocks into out + block * g, as they land.
  void drain_other_hosts(char* out, std::size_t block) const;
  // Every rank's block into out + block * g once it is there: this rank's from `own`, the host
  // peers' from `host_gathered` (a buffer gather_host filled) or their slots when it is null,
  // the other hosts' from where they landed.
  void copy_out(char* out, const char* own, std::size_t block, const char* host_gathered) const;
  // The host peers' blocks (ring order), to wait on and read.
  std::vector<Inbox> host_inboxes() const;
  // World rank g's block, g != this rank.
  Inbox from(int g) const;
  // The other ranks in the order their blocks are there: host peers (read in place) in ring
  // order first, then the ranks whose blocks the network channel brings, in arrival order.
  const std::vector<int>& others() const { return others_; }
  // The tail of others() that the network channel brings (in pieces, as the transport moves
  // them); empty on one host. Bytes of those blocks: networked() * block.
  const std::vector<int>& networked() const { return links_->arrivals(); }
  // Whether world rank g's block is one of those.
  bool networked(int g) const;
  // This host's world ranks (this one included) by local rank, and the same ranks as runs of
  // consecutive world ranks, (first, count) in world order: where the host's blocks sit together
  // in a buffer in world-rank order.
  const std::vector<int>& host() const { return links_->host_members(); }
  const std::vector<std::pair<int, int64_t>>& host_runs() const { return links_->host_runs(); }
  char* staged_slot() const { return needed_ ? staged_.at(links_->local()) : nullptr; }
  // Where world rank g's block is read (g != this rank), without waiting: for local paths that
  // compute on whatever the buffers hold (the slots: never a Direct call's buffers).
  const char* data_of(int g) const;

 private:
  void start(OpCore& core, std::size_t block, std::size_t chunk, const Direct& direct);

  const comm::Parts* c_ = nullptr;
  const Links* links_ = nullptr;
  OpCore* core_ = nullptr;
  bool needed_ = false;
  shm::SlotArray staged_, rail_in_;
  shm::SignalArray staged_ready_, rail_landed_;
  Tally staged_tally_, rail_tally_;
  uint64_t staged_base_ = 0, rail_base_ = 0;
  std::size_t block_ = 0;
  Direct direct_;            // this call's network buffers (null: the slots)
  std::vector<int> others_;  // the host ring, then the arrivals
};

}  // namespace fluxcpp::ops
