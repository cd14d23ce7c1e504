#include "ops/core/peer_order.hpp"

#include <algorithm>

#include "comm/context_impl.hpp"

namespace fluxcpp::ops {

PeerOrder::PeerOrder(const detail::ContextImpl& c) {
  const int W = c.world_size(), r = c.world_rank(), nid = c.node_id();
  for (int i = 1; i < W; ++i) {
    up_.push_back((r + i) % W);
    down_.push_back((r + W - i) % W);
  }
  up_self_ = up_;
  up_self_.push_back(r);
  // Stable: each part keeps the ring order.
  auto remote = [&](int g) { return c.node_of(g) != nid; };
  send_ = up_;
  std::stable_partition(send_.begin(), send_.end(), remote);
  receive_ = down_;
  std::stable_partition(receive_.begin(), receive_.end(), [&](int g) { return !remote(g); });
}

std::vector<int> PeerOrder::ring_neighbours(int r, int W) {
  std::vector<int> out;
  for (int p : {(r - 1 + W) % W, (r + 1) % W})
    if (p != r && (out.empty() || out[0] != p)) out.push_back(p);
  return out;
}

}  // namespace fluxcpp::ops
