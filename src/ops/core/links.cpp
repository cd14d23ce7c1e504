#include "ops/core/links.hpp"

#include <algorithm>

#include "comm/parts.hpp"
#include "error_util.hpp"

namespace fluxcpp::ops {

int host_sum_order(int me, int L, int i) {
  return i < L - 1 ? (me + L - 1 - i) % L : me;
}

Links Links::of(const comm::Parts& c) {
  Placement p;
  p.rank = c.topo().world_rank();
  p.hosts.resize(static_cast<std::size_t>(c.topo().num_hosts()));
  for (int g = 0; g < c.topo().world_size(); ++g) {
    std::vector<int>& host = p.hosts[static_cast<std::size_t>(c.topo().host_of(g))];
    const auto q = static_cast<std::size_t>(c.topo().local_of(g));
    if (host.size() <= q) host.resize(q + 1, -1);
    host[q] = g;
  }
  return Links(p);
}

Links::Links(const Placement& p) : hosts_(p.hosts), rank_(p.rank) {
  int W = 0;
  for (const auto& h : hosts_) W += static_cast<int>(h.size());
  links_.resize(static_cast<std::size_t>(W));
  std::vector<bool> seen(links_.size(), false);
  for (int n = 0; n < hosts(); ++n)
    for (int q = 0; q < host_size(n); ++q) {
      const int g = hosts_[n][q];
      if (g < 0 || g >= W || seen[g])
        raise(Errc::kInternal, "links: rank {} at host {} local rank {} of {} ranks", g, n, q, W);
      seen[g] = true;
      links_[g].rank = g;
      links_[g].host = n;
      links_[g].local = q;
    }
  if (rank_ < 0 || rank_ >= W) raise(Errc::kInternal, "links: rank {} of {} ranks", rank_, W);
  host_ = links_[rank_].host;
  local_ = links_[rank_].local;
  for (const auto& h : hosts_) uniform_ = uniform_ && h.size() == hosts_[0].size();
  for (Link& l : links_) {
    if (l.rank == rank_) continue;
    l.route = l.host == host_ ? Route::kSlot : Route::kNet;
    if (!l.net()) continue;
    l.rail = rail(l.host);
    l.direct = l.rail == l.rank;
  }

  const int r = rank_, L = host_size(), N = hosts();
  for (int i = 1; i < W; ++i) {
    up_.push_back((r + i) % W);
    down_.push_back((r + W - i) % W);
  }
  up_self_ = up_;
  up_self_.push_back(r);
  // Stable: each part keeps the ring order.
  send_ = up_;
  std::stable_partition(send_.begin(), send_.end(), [&](int g) { return links_[g].net(); });
  receive_ = down_;
  std::stable_partition(receive_.begin(), receive_.end(), [&](int g) { return links_[g].shm(); });

  for (int i = 1; i < L; ++i) host_ring_.push_back(member((local_ + i) % L));
  for (int i = 0; i < L; ++i) sum_order_.push_back(host_sum_order(local_, L, i));
  std::vector<int> sorted = host_members();
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t a = 0; a < sorted.size();) {
    std::size_t b = a + 1;
    while (b < sorted.size() && sorted[b] == sorted[b - 1] + 1) ++b;
    host_runs_.emplace_back(sorted[a], static_cast<int64_t>(b - a));
    a = b;
  }

  for (int i = 1; i < N; ++i) {
    next_hosts_.push_back((host_ + i) % N);
    prev_hosts_.push_back((host_ + N - i) % N);
  }
  for (int n : next_hosts_)
    for (int j = 0; j < host_size(n); ++j)
      arrivals_.push_back(hosts_[n][(local_ + j) % host_size(n)]);
}

int Links::rank_of(int n, int q) const {
  return q >= 0 && q < host_size(n) ? hosts_[n][q] : -1;
}

std::vector<int> Links::ring_neighbours(int r, int W) {
  std::vector<int> out;
  for (int p : {(r - 1 + W) % W, (r + 1) % W})
    if (p != r && (out.empty() || out[0] != p)) out.push_back(p);
  return out;
}

}  // namespace fluxcpp::ops
