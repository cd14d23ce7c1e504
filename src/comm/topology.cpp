#include "comm/topology.hpp"

#include <numeric>
#include <utility>

#include "error_util.hpp"

namespace fluxcpp::comm {

Topology::Topology(int world_rank, std::vector<int> host_of, std::vector<int> local_of)
    : rank_(world_rank), host_of_(std::move(host_of)), local_of_(std::move(local_of)) {
  const int size = static_cast<int>(host_of_.size());
  if (size < 1 || local_of_.size() != host_of_.size() || rank_ < 0 || rank_ >= size)
    raise(Errc::kInternal, "topology: rank {} of {} ranks ({} local ranks)", rank_, size,
          local_of_.size());
  for (int r = 0; r < size; ++r) {
    const int h = host_of_[r], l = local_of_[r];
    if (h < 0 || l < 0) raise(Errc::kInternal, "topology: rank {} on host {} as {}", r, h, l);
    if (static_cast<int>(members_.size()) <= h) members_.resize(h + 1);
    if (static_cast<int>(members_[h].size()) <= l) members_[h].resize(l + 1, -1);
    members_[h][l] = r;
  }
  for (std::size_t h = 0; h < members_.size(); ++h)
    for (std::size_t l = 0; l < members_[h].size(); ++l)
      if (members_[h][l] < 0)
        raise(Errc::kInternal, "topology: host {} has no local rank {}", h, l);
  for (const auto& m : members_) uniform_ = uniform_ && m.size() == members_[0].size();
}

Topology Topology::one_host(int world_rank, int world_size) {
  std::vector<int> host(static_cast<std::size_t>(world_size), 0), local(host.size());
  std::iota(local.begin(), local.end(), 0);
  return Topology(world_rank, std::move(host), std::move(local));
}

}  // namespace fluxcpp::comm
