// The link table: how this rank reaches every rank of the context, and the orders in which the
// exchanges visit them, worked out once per op from where the ranks are. It is what NCCL's
// per-peer connectors and MSCCL++'s connections are to their collectives: the exchanges, the
// handshake, PairPlan and SingleCopy read it and never ask the context which host a rank is on.
//
// A link to world rank g is one of
//   self  g is this rank;
//   slot  g is on this host: its data is read in (and written for it into) the slot with its
//         local rank in the host's shared segments (the links a single copy can serve too);
//   net   g is on another host: a network transfer. The transfers of a per-host block run
//         between rail peers (the ranks with the same local rank, one per host: rail(n) is this
//         rank's peer on host n), so g's block lands in the rail-in slot of the rank of this
//         host with g's local rank: this rank itself when `direct`, else a host peer's, read
//         there. (The all-to-all sends each block straight to its target instead.)
//
// A value: built from a Placement (hosts and their ranks) without a network, so that it is
// unit-tested for any layout (tests/ops/links_test.cpp); Links::of(context) is the one place where
// src/ops reads the context's topology. Hosts may have different numbers of ranks (the table
// describes them; the ops across hosts refuse them at create).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace fluxcpp::comm {
class Parts;
}

namespace fluxcpp::ops {

// Where the ranks are: hosts[n][q] is the world rank of local rank q of host n; `rank` is this
// rank. Every world rank in [0, W) appears once.
struct Placement {
  std::vector<std::vector<int>> hosts;
  int rank = 0;
};

enum class Route { kSelf, kSlot, kNet };

struct Link {
  int rank = -1;  // the peer's world rank
  Route route = Route::kSelf;
  int host = 0;   // the peer's host
  int local = 0;  // its local rank on its host: kSlot, its slot on this host; kNet, the slot of
                  // this host whose rail-in holds its per-host blocks
  int rail = -1;  // kNet: the rank this rank exchanges with on the peer's host (-1: none there)
  bool direct = false;  // kNet: the peer is that rank (its blocks land in this rank's rail-in)
  bool net() const { return route == Route::kNet; }
  bool shm() const { return route != Route::kNet; }  // self or slot: this host's memory
};

// The transport tags of the exchanges' network transfers (each op has its own transport; the
// tags keep apart the exchanges of one op), handed out here only.
enum class WireTag : int { kA2a = 1, kGather = 2, kReduce = 3 };

class Links {
 public:
  Links() = default;
  explicit Links(const Placement& p);
  // The table of this rank of `c` (local: reads the context's placement).
  static Links of(const comm::Parts& c);

  int rank() const { return rank_; }
  int world() const { return static_cast<int>(links_.size()); }
  int hosts() const { return static_cast<int>(hosts_.size()); }
  int host() const { return host_; }    // this rank's host
  int local() const { return local_; }  // this rank's local rank
  int host_size() const { return host_size(host_); }
  int host_size(int n) const { return static_cast<int>(hosts_[n].size()); }
  // Every host has as many ranks as the first.
  bool uniform() const { return uniform_; }
  // Ranks on other hosts exist: the op needs the network.
  bool networked() const { return hosts() > 1; }

  const Link& link(int g) const { return links_[g]; }
  // World rank of local rank q of host n (-1: host n has fewer ranks).
  int rank_of(int n, int q) const;
  // World rank of local rank q of this host.
  int member(int q) const { return hosts_[host_][q]; }
  // This rank's rail peer on host n (its local rank there; -1: none), rail(host()) == rank().
  int rail(int n) const { return rank_of(n, local_); }

  // Ring orders over the world (hand out from r+1 up, receive from r-1 down: peers do not all
  // wait for the same rank; peer r-i handed ours out at its own step i).
  const std::vector<int>& up() const { return up_; }            // r+1, ..., r-1
  const std::vector<int>& up_self() const { return up_self_; }  // r+1, ..., r-1, r
  const std::vector<int>& down() const { return down_; }        // r-1, ..., r+1
  // The all-to-all orders: up() with other hosts' ranks first (the slowest path starts first),
  // down() with this host's first (they land at memory speed); each part keeps the ring order.
  // On one host both are the host's ring over local ranks, so a host's ranks meet in matching
  // order.
  const std::vector<int>& send() const { return send_; }
  const std::vector<int>& receive() const { return receive_; }

  // This host: its ranks by local rank (this one included), the others in ring order of local
  // rank (me+1, ..., me-1), and its ranks as runs of consecutive world ranks, (first, count) in
  // world order (where the host's blocks sit together in a world-ordered buffer).
  const std::vector<int>& host_members() const { return hosts_[host_]; }
  const std::vector<int>& host_ring() const { return host_ring_; }
  const std::vector<std::pair<int, int64_t>>& host_runs() const { return host_runs_; }
  // The local ranks whose shares the reducer of a block adds, in order: the others counting down
  // from me-1, then itself (its own share last) — the order in which ring-ordered producers
  // finish the shares of a block (docs/ops/reduce_scatter.md).
  const std::vector<int>& sum_order() const { return sum_order_; }

  // The other hosts in ring order: next_hosts() n+1, ..., n-1 (where the rail transfers come
  // from first), prev_hosts() n-1, ..., n+1 (where they go first).
  const std::vector<int>& next_hosts() const { return next_hosts_; }
  const std::vector<int>& prev_hosts() const { return prev_hosts_; }
  // The other hosts' ranks in the order their per-host blocks arrive: host by host from the
  // next, each from this rank's own rail peer up in local rank.
  const std::vector<int>& arrivals() const { return arrivals_; }

  // The ring neighbours r-1 and r+1 of rank r among W, each once, r itself left out (none at
  // W = 1, one at W = 2): the default peers of a point-to-point op.
  static std::vector<int> ring_neighbours(int r, int W);

 private:
  std::vector<std::vector<int>> hosts_;
  int rank_ = 0, host_ = 0, local_ = 0;
  bool uniform_ = true;
  std::vector<Link> links_;
  std::vector<int> up_, up_self_, down_, send_, receive_;
  std::vector<int> host_ring_, sum_order_, next_hosts_, prev_hosts_, arrivals_;
  std::vector<std::pair<int, int64_t>> host_runs_;
};

// The i-th local rank whose share the rank with local rank `me` adds among L (Links::sum_order).
int host_sum_order(int me, int L, int i);

}  // namespace fluxcpp::ops
