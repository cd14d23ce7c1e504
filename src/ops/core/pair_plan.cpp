#include "ops/core/pair_plan.hpp"

#include <algorithm>

namespace fluxcpp::ops {

PairPlan::PairPlan(const Links& links, const std::vector<int>& all, int width) {
  const int W = links.world(), r = links.rank(), nid = links.host();
  networked_ = links.networked();
  self_ = links.local();
  auto host_of = [&](int g) { return links.link(g).host; };
  auto listed = [&](int a, int k) { return all[static_cast<std::size_t>(a) * width + k]; };
  // Position of rank b among rank a's peers on a's host.
  auto host_position = [&](int a, int b) {
    int pos = 0;
    for (int k = 0; k < width; ++k) {
      const int x = listed(a, k);
      if (x < 0 || host_of(x) != host_of(a)) continue;
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
      const bool same = host_of(x) == host_of(a);
      crosses_ = crosses_ || !same;
      count += same ? 1 : 0;
    }
    if (host_of(a) == nid) host_slots_ = std::max(host_slots_, count);
  }
  for (int k = 0; k < width; ++k) {
    const int p = listed(r, k);
    if (p < 0) continue;
    PairRoute route;
    route.rank = p;
    if (links.link(p).shm()) {
      route.local = links.link(p).local;
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
