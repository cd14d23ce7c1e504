// Topology: where a context's ranks are — every rank's host and rank on that host. A plain value
// (no MPI, no threads), fixed when the context is made; copies are cheap enough to keep.
//
// Hosts are numbered from 0 in the order of their lowest world rank; a host's ranks are numbered
// from 0 (its "local" ranks). Several simulated hosts may share one machine (ranks_per_host,
// FLUXCPP_HOST_ID).
#pragma once

#include <vector>

namespace fluxcpp::comm {

class Topology {
 public:
  // One rank, alone.
  Topology() : Topology(0, {0}, {0}) {}
  // Rank `world_rank` of host_of.size() ranks: rank r is rank local_of[r] of host host_of[r].
  // Every host's local ranks must be 0..n-1 (kInternal otherwise).
  Topology(int world_rank, std::vector<int> host_of, std::vector<int> local_of);
  // Rank `world_rank` of `world_size` ranks on one host.
  static Topology one_host(int world_rank, int world_size);

  int world_rank() const { return rank_; }
  int world_size() const { return static_cast<int>(host_of_.size()); }
  // This rank's host, its rank there, and the number of ranks there.
  int host_id() const { return host_of_[rank_]; }
  int host_rank() const { return local_of_[rank_]; }
  int host_size() const { return static_cast<int>(members_[host_id()].size()); }
  int num_hosts() const { return static_cast<int>(members_.size()); }
  // Every host has as many ranks (the rails, one per local rank, then span every host).
  bool uniform_hosts() const { return uniform_; }
  // World rank of rank `local` of host `host`.
  int world_rank_of(int host, int local) const { return members_[host][local]; }
  int host_of(int world_rank) const { return host_of_[world_rank]; }
  int local_of(int world_rank) const { return local_of_[world_rank]; }

 private:
  int rank_ = 0;
  bool uniform_ = true;
  std::vector<int> host_of_, local_of_;
  std::vector<std::vector<int>> members_;  // [host][local] = world rank
};

}  // namespace fluxcpp::comm
