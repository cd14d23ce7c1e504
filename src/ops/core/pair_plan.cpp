#include "ops/core/pair_plan.hpp"

#include <algorithm>

#include "comm/context_impl.hpp"

namespace fluxcpp::ops {

PairPlan::PairPlan(const detail::ContextImpl& c, const std::vector<int>& all, int width) {
  const int W = c.world_size(), r = c.world_rank(), nid = c.node_id();
  networked_ = c.num_nodes() > 1;
  self_ = c.node_rank();
  auto listed = [&](int a, int k) { return all[static_cast<std::size_t>(a) * width + k]; };
  // Position of rank b among rank a's peers on a's host.
  auto host_position = [&](int a, int b) {
    int pos = 0;
    for (int k = 0; k < width; ++k) {
      const int x = listed(a, k);
      if (x < 0 || c.node_of(x) != c.node_of(a)) continue;
      if (x == b) return pos;
      ++pos;
    }
    return -1;
  };
  for (int a = 0; a < W; ++a) {
    int count = 0;
    for (int k = 0; k < width; ++k) {
      const int x = listed(a, k);
      if (x < 0) continue;
      const bool same = c.node_of(x) == c.node_of(a);
      crosses_ = crosses_ || !same;
      count += same ? 1 : 0;
    }
    if (c.node_of(a) == nid) host_slots_ = std::max(host_slots_, count);
  }
  for (int k = 0; k < width; ++k) {
    const int p = listed(r, k);
    if (p < 0) continue;
    PairRoute route;
    route.rank = p;
    if (c.node_of(p) == nid) {
      route.local = c.local_of(p);
      route.mine = host_position(r, p);
      route.theirs = host_position(p, r);
    } else {
      route.net = static_cast<int>(net_peers_.size());
      net_peers_.push_back(p);
    }
    routes_.push_back(route);
  }
}

}  // namespace fluxcpp::ops
