#include "shm/symmetric_buffer.hpp"

#include "error_util.hpp"

namespace fluxcpp::shm {

SymmetricBuffer::SymmetricBuffer(HostTeam& team, std::size_t bytes, const std::string& tag)
    : bytes_(bytes), rank_(team.rank()) {
  const int n = team.size();
  Segment own;
  std::string name = unique_segment_name(tag);
  team.agree([&] { own = Segment::create(name, bytes); });
  std::vector<std::string> names = team.allgather(name);
  std::vector<Segment> segs(n);
  segs[rank_] = std::move(own);
  try {
    team.agree([&] {
      for (int i = 0; i < n; ++i)
        if (i != rank_) segs[i] = Segment::open(names[i], bytes);
    });
  } catch (...) {
    segs[rank_].unlink();  // the destructor would too; be explicit about the no-leak rule
    throw;
  }
  // Every rank has mapped every segment (agree is a barrier): the names can go.
  segs[rank_].unlink();
  segments_ = std::move(segs);
}

}  // namespace fluxcpp::shm
