// The order in which the ops visit their peers, written once. Blocks are handed out from r+1 up
// (r+1, r+2, ..., r-1 mod W), so that peers do not all wait for the same rank, and received from
// r-1 down (peer r-i handed ours out at its own step i).
//
// The all-to-all family (A2aExchange::targets() and sources()) sorts each order by host, keeping
// the ring order within each part: blocks go out to other hosts' ranks first (the slowest path:
// the transport ships each as it is published), then to this host's; they come in from this
// host's ranks first (they land at memory speed), then from other hosts'. Restricted to one host,
// these orders are the host's own ring over local ranks (local ranks follow world ranks), so
// every rank of a host meets its peers in matching order.
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
  // `up`, other hosts' ranks first, then this host's: the all-to-all send order.
  const std::vector<int>& send() const { return send_; }
  // `down`, this host's ranks first, then other hosts': the all-to-all receive order.
  const std::vector<int>& receive() const { return receive_; }
  // The ring neighbours r-1 and r+1 of rank r among W, each once, r itself left out (none at W = 1,
  // one at W = 2): the default peers of a point-to-point op.
  static std::vector<int> ring_neighbours(int r, int W);

 private:
  std::vector<int> up_, up_self_, down_, send_, receive_;
};

}  // namespace fluxcpp::ops
