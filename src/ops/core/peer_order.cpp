#include "ops/core/peer_order.hpp"

#include "comm/context_impl.hpp"

namespace fluxcpp::ops {

PeerOrder::PeerOrder(const detail::ContextImpl& c) {
  const int W = c.world_size(), r = c.world_rank(), nid = c.node_id();
  auto on_host = [&](int g) { return c.node_of(g) == nid; };
  for (int i = 1; i < W; ++i) {
    const int t = (r + i) % W, s = (r + W - i) % W;
    up_.push_back(t);
    down_.push_back(s);
    (on_host(t) ? up_host_ : up_remote_).push_back(t);
    (on_host(s) ? down_host_ : down_remote_).push_back(s);
  }
  up_self_ = up_;
  up_self_.push_back(r);
  for (int q = 0; q < c.node_size(); ++q) host_.push_back(c.world_rank_of(nid, q));
  for (int g = 0; g < W; ++g) local_.push_back(on_host(g));
}

std::vector<int> PeerOrder::ring_neighbours(int r, int W) {
  std::vector<int> out;
  for (int p : {(r - 1 + W) % W, (r + 1) % W})
    if (p != r && (out.empty() || out[0] != p)) out.push_back(p);
  return out;
}

}  // namespace fluxcpp::ops
