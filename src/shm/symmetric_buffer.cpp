#include "shm/symmetric_buffer.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "error_util.hpp"
#include "fault.hpp"

namespace fluxcpp::shm {

SymmetricBuffer::SymmetricBuffer(HostTeam& team, std::size_t bytes, const std::string& tag)
    : bytes_(bytes), rank_(team.rank()) {
  const int n = team.size();
  std::vector<Segment> segs(n);
  try {
    team.agree([&] { segs[rank_] = Segment::create(team.segment_name(rank_, tag), bytes); });
    fault_point("bootstrap", team.id());
    team.agree([&] {
      for (int i = 0; i < n; ++i)
        if (i != rank_) segs[i] = Segment::open(team.segment_name(i, tag), bytes);
    });
  } catch (...) {
    unlink_team_segments(team, tag);
    throw;
  }
  // Every rank has mapped every segment (agree is a barrier): the names can go.
  segs[rank_].unlink();
  segments_ = std::move(segs);
}

void unlink_team_segments(const HostTeam& team, const std::string& tag) noexcept {
  for (int i = 0; i < team.size(); ++i) {
    try {
      shm_unlink(team.segment_name(i, tag).c_str());
    } catch (...) {
    }
  }
}

int remove_stale_segments() noexcept {
  int removed = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (const dirent* e = readdir(dir)) {
    // "fluxcpp-<pid>-...": the creator's pid right after the prefix.
    const char* name = e->d_name;
    if (std::strncmp(name, "fluxcpp-", 8) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name + 8, &end, 10);
    if (end == name + 8 || *end != '-' || pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
    if (shm_unlink((std::string("/") + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace fluxcpp::shm
