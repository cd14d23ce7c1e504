#include "shm/symmetric_buffer.hpp"

#include "error_util.hpp"
#include "fault.hpp"

namespace fluxcpp::shm {

SymmetricBuffer::SymmetricBuffer(HostTeam& team, std::size_t bytes, const std::string& tag)
    : bytes_(bytes), rank_(team.rank()) {
  const int n = team.size();
  std::vector<Segment> segs(n);
  try {
    team.agree([&] { segs[rank_] = Segment::create(tag, bytes); });
    fault_point("bootstrap", team.id());
    const std::vector<std::string> names = team.allgather(segs[rank_].name());
    team.agree([&] {
      if (static_cast<int>(names.size()) != n)
        raise(Errc::kInternal, "shm: {} segment names for a team of {}", names.size(), n);
      for (int i = 0; i < n; ++i)
        if (i != rank_) segs[i] = Segment::open(names[i], bytes);
    });
  } catch (...) {
    // Own name first, then whatever a dead peer left: its lock died with it.
    segs[rank_].unlink();
    remove_stale_segments();
    throw;
  }
  // Every rank has mapped every segment (agree is a barrier): the names can go.
  segs[rank_].unlink();
  segments_ = std::move(segs);
}

}  // namespace fluxcpp::shm
