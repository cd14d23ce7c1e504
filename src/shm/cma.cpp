#include "shm/cma.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <string>

#include "error_util.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::shm {

namespace {

int read_scope_from_proc() {
  std::FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f == nullptr) return -1;
  int scope = -1;
  if (std::fscanf(f, "%d", &scope) != 1) scope = -1;
  std::fclose(f);
  return scope;
}

int set_ptracer_with_prctl(unsigned long who) {
#ifdef PR_SET_PTRACER
  return prctl(PR_SET_PTRACER, who, 0, 0, 0);
#else
  (void)who;
  return -1;
#endif
}

#ifdef PR_SET_PTRACER
constexpr unsigned long kPtracerAny = PR_SET_PTRACER_ANY;
#else
constexpr unsigned long kPtracerAny = static_cast<unsigned long>(-1);
#endif

struct GrantState {
  std::mutex mu;
  int references = 0;    // guarded by mu
  bool granted = false;  // we set PR_SET_PTRACER_ANY and have not undone it; guarded by mu
  CmaHooks hooks = cma_default_hooks();  // guarded by mu (probe is read unguarded: tests only)
};

GrantState& grant_state() {
  static GrantState* s = new GrantState;  // leaked: grants may be released in static destructors
  return *s;
}

}  // namespace

void cma_read(pid_t pid, uint64_t remote, void* dst, std::size_t bytes) {
  auto* d = static_cast<char*>(dst);
  std::size_t done = 0;
  while (done < bytes) {
    iovec local{d + done, bytes - done};
    iovec rem{reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t n = process_vm_readv(pid, &local, 1, &rem, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      raise_errno(errno, "cma: reading {} bytes from process {} failed", bytes - done,
                  static_cast<long>(pid));
    }
    if (n == 0) raise(Errc::kSystem, "cma: process {} returned no data", static_cast<long>(pid));
    done += static_cast<std::size_t>(n);
  }
}

bool cma_probe(pid_t pid, uint64_t remote, uint64_t expected) noexcept {
  uint64_t got = ~expected;
  iovec local{&got, sizeof got};
  iovec rem{reinterpret_cast<void*>(remote), sizeof got};
  return process_vm_readv(pid, &local, 1, &rem, 1, 0) == static_cast<ssize_t>(sizeof got) &&
         got == expected;
}

CmaHooks cma_default_hooks() {
  CmaHooks h;
  h.read_scope = read_scope_from_proc;
  h.set_ptracer = set_ptracer_with_prctl;
  h.probe = cma_probe;
  return h;
}

CmaHooks cma_set_hooks_for_testing(const CmaHooks& hooks) {
  GrantState& s = grant_state();
  std::lock_guard<std::mutex> lock(s.mu);
  CmaHooks previous = s.hooks;
  s.hooks = hooks;
  return previous;
}

int yama_ptrace_scope() noexcept {
  GrantState& s = grant_state();
  int (*read)() = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    read = s.hooks.read_scope;
  }
  return read();
}

PtracerGrant PtracerGrant::acquire() noexcept {
  const int scope = yama_ptrace_scope();  // outside the lock: it reads a file
  GrantState& s = grant_state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.references++ == 0 && scope == 1) s.granted = s.hooks.set_ptracer(kPtracerAny) == 0;
  PtracerGrant g;
  g.held_ = true;
  return g;
}

PtracerGrant& PtracerGrant::operator=(PtracerGrant&& o) noexcept {
  if (this != &o) {
    reset();
    held_ = o.held_;
    o.held_ = false;
  }
  return *this;
}

void PtracerGrant::reset() noexcept {
  if (!held_) return;
  held_ = false;
  GrantState& s = grant_state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (--s.references == 0 && s.granted) {
    s.hooks.set_ptracer(0);  // no ptracer: back to Yama's default for this process
    s.granted = false;
  }
}

int PtracerGrant::references() noexcept {
  GrantState& s = grant_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.references;
}

bool PtracerGrant::granted() noexcept {
  GrantState& s = grant_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.granted;
}

CmaPeers cma_probe_team(HostTeam& team, PtracerGrant& grant) {
  const int n = team.size(), me = team.rank();
  CmaPeers result;
  // The word peers read; volatile keeps it in memory for the duration of the probe.
  volatile uint64_t word = 0x5EED0000ull + static_cast<uint64_t>(me);
  std::vector<std::string> info = team.allgather(
      fmt::format("{} {}", static_cast<long>(getpid()), reinterpret_cast<uintptr_t>(&word)));
  std::vector<uint64_t> addrs(n);
  result.pids.resize(n);
  for (int q = 0; q < n; ++q) {
    long pid = 0;
    unsigned long long addr = 0;
    if (std::sscanf(info[q].c_str(), "%ld %llu", &pid, &addr) != 2)
      raise(Errc::kInternal, "cma: malformed probe record '{}' of host rank {}", info[q], q);
    result.pids[q] = static_cast<pid_t>(pid);
    addrs[q] = addr;
  }
  if (n == 1) {
    result.ok = true;
    return result;
  }
  bool (*probe)(pid_t, uint64_t, uint64_t) = nullptr;
  {
    GrantState& s = grant_state();
    std::lock_guard<std::mutex> lock(s.mu);
    probe = s.hooks.probe;
  }
  // One round: read every peer, then share "ok scope" (the allgather is also the barrier after
  // which `word` may change). Every rank sees the same records, so every rank decides alike.
  bool any_restricted = false;
  auto round = [&] {
    bool ok = true;
    for (int q = 0; q < n; ++q)
      if (q != me)
        ok = probe(result.pids[q], addrs[q], 0x5EED0000ull + static_cast<uint64_t>(q)) && ok;
    std::vector<std::string> all =
        team.allgather(fmt::format("{} {}", ok ? 1 : 0, yama_ptrace_scope()));
    bool all_ok = true;
    for (const std::string& r : all) {
      int rok = 0, scope = -1;
      std::sscanf(r.c_str(), "%d %d", &rok, &scope);
      all_ok = all_ok && rok == 1;
      any_restricted = any_restricted || scope == 1;
    }
    return all_ok;
  };
  result.ok = round();
  if (result.ok || !any_restricted) return result;
  // Only now, and only under policy 1, let the peers in; the allgather of the second round's
  // records would come too late, so agree first that every rank has its grant.
  grant = PtracerGrant::acquire();
  team.agree([] {});
  result.ok = round();
  if (!result.ok) grant.reset();
  return result;
}

}  // namespace fluxcpp::shm
