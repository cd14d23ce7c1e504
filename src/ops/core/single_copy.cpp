#include "ops/core/single_copy.hpp"

#include <unistd.h>

#include <cstdio>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "shm/cma.hpp"

namespace fluxcpp::ops {

SingleCopy::SingleCopy(detail::ContextImpl& c, shm::Layout& layout) {
  done_ = layout.signals("read-done", c.node_size());
  withdrawn_ = layout.signals("withdrawn", 1);
}

void SingleCopy::probe(OpCore& core) {
  detail::ContextImpl& c = core.ctx();
  const int L = c.node_size(), me = c.node_rank();
  if (L == 1 || c.config().copy_engine == CopyEngine::kShm) return;
  shm::cma_allow_peers();
  // Each rank reads a word a peer wrote into its segment, through the peer's own address space.
  auto* word = reinterpret_cast<volatile uint64_t*>(&withdrawn_.at(me).payload[0]);
  *word = 0x5EED0000ull + static_cast<uint64_t>(me);
  std::vector<std::string> info = c.allgather(
      fmt::format("{} {}", static_cast<long>(getpid()), reinterpret_cast<uintptr_t>(word)));
  bool ok = true;
  for (int q = 0; q < L; ++q) {
    long pid = 0;
    unsigned long long addr = 0;
    std::sscanf(info[q].c_str(), "%ld %llu", &pid, &addr);
    pids_.push_back(static_cast<pid_t>(pid));
    if (q != me)
      ok = ok && shm::cma_probe(pid_t(pid), addr, 0x5EED0000ull + static_cast<uint64_t>(q));
  }
  int all_ok = ok ? 1 : 0;
  comm::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, c.node_comm()),
                  "MPI_Allreduce");
  *word = 0;  // only now: every peer has read it (the allreduce is a barrier)
  ok_ = all_ok != 0;
  comm::agree(c.comm(), [&] {
    if (c.config().copy_engine == CopyEngine::kCma && !ok_)
      raise(Errc::kSystem,
            "{}: FLUXCPP_COPY_ENGINE=cma but process_vm_readv between the ranks of host {} is "
            "not permitted (ptrace policy); use auto or shm",
            core.op(), c.node_id());
  });
}

void SingleCopy::pull(OpCore& core, const std::function<void(int q)>& read) {
  detail::ContextImpl& c = core.ctx();
  const int L = c.node_size(), me = c.node_rank(), nid = c.node_id();
  const uint64_t e = core.epoch();
  std::exception_ptr failed;
  for (int i = 1; i < L; ++i) {
    const int q = (me + i) % L;
    try {
      if (!failed) {
        read(q);
        // An owner that gave up waiting for us (timeout) may have let its caller reuse its
        // memory before our read: it withdraws the call first, so a read checked after it is
        // valid.
        if (shm::signal_load(withdrawn_.at(q)) >= e)
          raise(Errc::kTimeout, "{}: rank {} withdrew its input before this rank read it (rank {})",
                core.op(), c.world_rank_of(nid, q), c.world_rank());
      }
    } catch (...) {
      failed = std::current_exception();
    }
    // 2e: read; 2e+1: the read failed. Raised even on failure, so q never waits in vain and
    // learns that this call failed.
    shm::signal_set(done_.at(q, me), 2 * e + (failed ? 1 : 0));
  }
  int failed_reader = -1;
  for (int i = 1; i < L; ++i) {
    const int q = (me + L - i) % L;
    try {
      core.wait(done_.at(me, q), 2 * e, c.world_rank_of(nid, q), done_.label(q));
    } catch (...) {
      shm::signal_set(withdrawn_.at(me), e);  // withdraw: see the reader's check
      throw;
    }
    if (shm::signal_load(done_.at(me, q)) & 1) failed_reader = c.world_rank_of(nid, q);
  }
  if (failed) std::rethrow_exception(failed);
  if (failed_reader >= 0)
    raise(Errc::kSystem, "{}: rank {} could not read this rank's memory (rank {})", core.op(),
          failed_reader, c.world_rank());
}

}  // namespace fluxcpp::ops
