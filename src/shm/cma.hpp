// Cross-memory attach: single-copy reads from a peer process's memory (process_vm_readv), the
// same mechanism MPI's shared-memory transport uses for large messages. Needs ptrace permission
// over the peer (same user; under Yama's "restricted" policy also the peer's consent), so it is
// probed before use.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fluxcpp::shm {

class HostTeam;

// Copies `bytes` from address `remote` of process `pid` into `dst`. Raises Error(kSystem) naming
// the peer on failure.
void cma_read(pid_t pid, uint64_t remote, void* dst, std::size_t bytes);

// True if cma_read from `pid` works: reads 8 bytes at `remote` and compares them with
// `expected`.
bool cma_probe(pid_t pid, uint64_t remote, uint64_t expected) noexcept;

// The Yama ptrace policy, /proc/sys/kernel/yama/ptrace_scope: 0 classic (same user may read),
// 1 restricted (only ancestors, or processes the target named with PR_SET_PTRACER), 2 admin only,
// 3 no attach; -1 when the kernel has no Yama (then only the classic rules apply).
int yama_ptrace_scope() noexcept;

// One reference to the process-wide ptracer permission that lets the host's peers read this
// process under Yama policy 1: prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) lets any process of this
// user read it. The first reference sets it, and only under policy 1 (0 and no Yama need nothing;
// 2 and 3 are not relaxed by it); the last release undoes it (PR_SET_PTRACER, 0). An op holds a
// reference while it reads peers with cma. Thread-safe; move-only.
//
// Linux keeps one ptracer per process and offers no way to read it: the undo also clears a
// permission someone else set while a reference was held. (cma_probe_team takes no reference
// when the probe works without one, e.g. because the process consented before.)
class PtracerGrant {
 public:
  PtracerGrant() = default;  // holds no reference
  static PtracerGrant acquire() noexcept;
  PtracerGrant(PtracerGrant&& o) noexcept : held_(o.held_) { o.held_ = false; }
  PtracerGrant& operator=(PtracerGrant&& o) noexcept;
  PtracerGrant(const PtracerGrant&) = delete;
  PtracerGrant& operator=(const PtracerGrant&) = delete;
  ~PtracerGrant() { reset(); }

  void reset() noexcept;  // releases the reference, if held
  bool held() const { return held_; }

  static int references() noexcept;  // held process-wide
  static bool granted() noexcept;    // PR_SET_PTRACER_ANY is set by fluxcpp now

 private:
  bool held_ = false;
};

// Collective over `team` (the ranks of one host). Finds out whether every rank can read every
// other with process_vm_readv: each rank reads a word of each peer. If some read fails and the
// Yama policy is 1, every rank takes a PtracerGrant (into `grant`) and the probe runs again; if
// that fails too the grant is released at once. Every rank returns the same `ok`; `pids` holds
// each team rank's process id (for cma_read). A team of one is ok without probing.
struct CmaPeers {
  bool ok = false;
  std::vector<pid_t> pids;
};
CmaPeers cma_probe_team(HostTeam& team, PtracerGrant& grant);

// Test seams: how the Yama policy is read, how the ptracer is set (prctl(PR_SET_PTRACER, who);
// returns 0 on success) and how cma_probe_team reads a peer. Returns the previous hooks.
struct CmaHooks {
  int (*read_scope)() = nullptr;
  int (*set_ptracer)(unsigned long who) = nullptr;
  bool (*probe)(pid_t pid, uint64_t remote, uint64_t expected) = nullptr;
};
CmaHooks cma_default_hooks();
CmaHooks cma_set_hooks_for_testing(const CmaHooks& hooks);

}  // namespace fluxcpp::shm
