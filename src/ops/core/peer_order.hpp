// The order in which the ops visit their peers, written once. Blocks are handed out from r+1 up
// (r+1, r+2, ..., r-1 mod W), so that peers do not all wait for the same rank, and received from
// r-1 down (peer r-i handed ours out at its own step i). The all-to-all family splits each order
// by host: other hosts' blocks go out first (the slowest path: the transport ships each as it is
// published), then the host's; the host's come in first (they land at memory speed), then the
// other hosts'. Restricted to one host, these orders are the host's own ring over local ranks
// (local ranks follow world ranks), so every rank of a host meets its peers in matching order.
#pragma once

#include <vector>

namespace fluxcpp::detail {
class ContextImpl;
}

namespace fluxcpp::ops {

class PeerOrder {
 public:
  PeerOrder() = default;
  explicit PeerOrder(const detail::ContextImpl& c);

  const std::vector<int>& up() const { return up_; }            // r+1, ..., r-1
  const std::vector<int>& up_self() const { return up_self_; }  // r+1, ..., r-1, r
  const std::vector<int>& down() const { return down_; }        // r-1, ..., r+1
  // `up` split: other hosts' ranks, then this host's (the all-to-all send order).
  const std::vector<int>& up_remote() const { return up_remote_; }
  const std::vector<int>& up_host() const { return up_host_; }
  // `down` split: this host's ranks, then other hosts' (the all-to-all receive order).
  const std::vector<int>& down_host() const { return down_host_; }
  const std::vector<int>& down_remote() const { return down_remote_; }
  // Every rank of this host, this one included, by local rank.
  const std::vector<int>& host() const { return host_; }
  // Whether world rank g is on this host.
  bool is_host(int g) const { return local_[static_cast<std::size_t>(g)]; }
  // The ring neighbours r-1 and r+1 of rank r among W, each once, r itself left out (none at W = 1,
  // one at W = 2): the default peers of a point-to-point op.
  static std::vector<int> ring_neighbours(int r, int W);

 private:
  std::vector<bool> local_;
  std::vector<int> up_, up_self_, down_, up_remote_, up_host_, down_host_, down_remote_, host_;
};

}  // namespace fluxcpp::ops
