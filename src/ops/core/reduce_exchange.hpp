// The reduce-scatter pattern, shared by ReduceScatter and GemmRS: every rank contributes a share of
// every row block t, and t's owner gets their sum in a fixed order. Within a host the reducer of
// block t (the host rank with t's local rank) reads the host peers' shares of t in their "shares"
// slot. Across hosts that reducer sums its host's shares of t (in the accumulation type) into
// "host-out[host of t]", the network carries it to t's "host-in[this host]", and t adds the hosts'
// sums in host order. The order is part of the ops' contract (docs/ops/reduce_scatter.md): host
// ranks in Links::sum_order, then hosts by index; rounded once.
#pragma once

#include <functional>
#include <vector>

#include "fluxcpp/types.hpp"
#include "ops/core/links.hpp"
#include "ops/core/mailbox.hpp"
#include "ops/core/offload.hpp"

namespace fluxcpp::ops {

// The order in which the host ranks' shares of a block are added: Links::sum_order (GemmRS
// computes the block for rank r+i at its step i, its own last).

class ReduceExchange {
 public:
  ReduceExchange() = default;
  // Declares the regions before the core allocates: "shares" (W blocks of max_share_block,
  // when `needed`) and, across hosts, host-out/host-in slots of max_acc_block per host; across
  // hosts also allocates the host-sum scratch (collective: a failure is agreed, named for `op`).
  // `links` must outlive the exchange (the op's table).
  ReduceExchange(const comm::Parts& c, const Links& links, shm::Layout& layout,
                 std::size_t max_share_block, std::size_t max_acc_block, bool needed,
                 const char* op);

  // Starts a call with blocks of `share_block` bytes (shares) and `acc_block` bytes (host sums):
  // posts the host-sum transfers (each send goes once its sum is published). `direct`: across
  // hosts, alone on its host with shares already in the accumulation type, a rank's share of block
  // t is its host's sum: it is sent straight from the shares slot once share(t) is published, while
  // the op computes the next block.
  void begin(OpCore& core, std::size_t share_block, std::size_t acc_block, bool direct = false);
  // This rank's shares: block t at shares() + t * share_block.
  char* shares() const { return shares_.count() > 0 ? shares_.at(links_->local()) : nullptr; }
  Outbox share(int t) const;
  // The blocks t a host peer sums (t's local rank is another's): this rank's share of each must
  // be in shares(); the others (its own block, and those it sums for other hosts) are read from
  // own(t).
  const std::vector<int>& peer_blocks() const { return peer_blocks_; }

  // The fixed-order sum of this rank's block, `count` elements: shares are in share_dtype, host
  // sums in acc, the result rounded once into out_dtype at `output`. own(t): this rank's own
  // share of block t (its input or its shares slot).
  void reduce(DType share_dtype, DType acc, DType out_dtype, int64_t count,
              const std::function<const void*(int t)>& own, void* output);

  // Direct mode (see begin): elements [e0, e1) of the same sum, once the other hosts' sums of
  // them have landed — the same bits as reduce(), a few rows at a time, so an op can sum the
  // rows of its own block as soon as its GEMM has produced them. `own` is this rank's share of
  // its block; `output` its whole output block.
  bool direct() const { return direct_; }
  // Whether a call begun with direct = true is direct here (alone on the host, across hosts).
  bool sends_direct() const;
  void reduce_range(DType acc, DType out_dtype, int64_t e0, int64_t e1, const void* own,
                    void* output);

  // The latency path: every rank's whole set of shares (in acc, W blocks of `block` bytes) came
  // as its handshake payload; this rank's block summed in the order reduce() sums it (host ranks
  // in Links::sum_order on one host; hosts by index across hosts, one rank per host),
  // rounded once into out_dtype at `output`: the same bits.
  void sum_payloads(const OpCore& core, DType acc, DType out_dtype, std::size_t block,
                    int64_t count, void* output) const;

  // Host rank q's share of block t (q != this rank).
  Inbox share_of(int q, int t) const;
  // On one host: elements [e0, e1) of this rank's block summed as reduce() sums them (the same
  // bits), once the host peers' shares of them are published; `own` is this rank's share of its
  // block, `output` its whole output block (share dtype in and out).
  void reduce_host_range(DType dtype, int64_t e0, int64_t e1, const void* own, void* output) const;

  // Whether the shares leave this host over the network channel (then an op publishes them tile
  // by tile, so a share crosses the link while the next is computed).
  bool networked() const;

  // The sum with copy offload (one host of more than two ranks, Config::copy_offload): a comm
  // stream sums the host peers' shares of this rank's block as they land (in Links::sum_order:
  // the order ring-ordered producers finish them) while the op computes; finish_presum adds this
  // rank's own share (`own`, ready by then) and rounds once. The same order and bits as reduce().
  // allow_presum (at create; collective) allocates the scratch when the context qualifies;
  // presums() tells whether it did.
  void allow_presum(std::size_t max_acc_block, const char* op);
  bool presums() const { return !presum_.empty(); }
  void start_presum(Offload& copies, DType acc, int64_t count);
  void finish_presum(Offload& copies, DType acc, const void* own, DType out_dtype, void* output,
                     int64_t count);

 private:
  std::vector<const void*> host_shares(int t, const std::function<const void*(int t)>& own) const;

  // Host h's sum of this rank's block, landed in this rank's host-in slot (h != this host).
  Inbox host_sum_of(int h) const;

  const comm::Parts* c_ = nullptr;
  const Links* links_ = nullptr;
  OpCore* core_ = nullptr;
  shm::SlotArray shares_, host_out_, host_in_;
  shm::SignalArray share_ready_;  // [W] by block
  shm::SignalArray out_ready_;    // [hosts] this rank's host sums, for the transport's sends
  shm::SignalArray in_landed_;    // [hosts]
  Tally share_tally_, out_tally_, in_tally_;
  uint64_t share_base_ = 0, out_base_ = 0, in_base_ = 0;
  std::size_t share_block_ = 0, acc_block_ = 0;
  bool direct_ = false;
  std::vector<int> peer_blocks_;
  std::vector<char> host_sum_;  // across hosts: this host's sum of this rank's block
  std::vector<char> presum_;    // copy offload: the host peers' shares of this rank's block
};

}  // namespace fluxcpp::ops
