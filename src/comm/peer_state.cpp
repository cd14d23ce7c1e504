// Lifecycle::gone_host_peers: the state of the host peers' processes, read from /proc.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "comm/lifecycle.hpp"
#include "comm/topology.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

namespace {

// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 't' traced, 'Z' zombie...), or 0
// when the process is gone.
char process_state(long pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
  const std::string s(buf);
  const auto close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return '?';
  return s[close + 2];
}

}  // namespace

std::string Lifecycle::gone_host_peers(const Topology& topo) const {
  std::string out;
  for (int q = 0; q < topo.host_size(); ++q) {
    if (q == topo.host_rank() || host_pids_.size() <= static_cast<std::size_t>(q)) continue;
    const long pid = host_pids_[q];
    const char st = process_state(pid);
    const char* what = nullptr;
    if (st == 0 || st == 'Z' || st == 'X')
      what = "has exited";
    else if (st == 'T' || st == 't')
      what = "is stopped";
    if (what == nullptr) continue;
    out += fmt::format("{}rank {} (pid {}) {}", out.empty() ? "" : "; ",
                       topo.world_rank_of(topo.host_id(), q), pid, what);
  }
  return out;
}

}  // namespace fluxcpp::comm
