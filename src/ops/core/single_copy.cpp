#include "ops/core/single_copy.hpp"

#include <cmath>

#include "error_util.hpp"
#include "log.hpp"
#include "shm/cma.hpp"
#include "shm/cma_speed.hpp"

namespace fluxcpp::ops {

SingleCopy::SingleCopy(const comm::Parts& c, const Links& links, shm::Layout& layout)
    : forced_(c.runtime().config().copy_engine == CopyEngine::kCma),
      min_bytes_(c.runtime().config().cma_min_bytes) {
  done_ = layout.signals("read-done", links.host_size());
  withdrawn_ = layout.signals("withdrawn", 1);
}

void SingleCopy::probe(OpCore& core) {
  const comm::Parts& c = core.parts();
  const Links& links = core.links();
  if (links.host_size() == 1 || c.runtime().config().copy_engine == CopyEngine::kShm) return;
  // Each rank reads a word a peer wrote, through the peer's own address space; the ptracer
  // permission is asked for only if the Yama policy requires it, and held while the op lives.
  const shm::CmaPeers peers = shm::cma_probe_team(c.host(), grant_);
  pids_ = peers.pids;
  ok_ = peers.ok;
  // auto: a single copy only where it costs less than the two copies it replaces (measured on
  // this host now; every rank of the host gets the same ratio, and FLUXCPP_CMA_MAX_RATIO is agreed
  // at create, so they all decide alike). Not using it, the op gives the ptracer grant back.
  if (ok_ && !forced_) {
    const double ratio = shm::cma_copy_ratio(c.host(), pids_);
    faster_ = ratio < c.runtime().config().cma_max_ratio;
    if (std::isinf(ratio))
      FLUXCPP_LOG_WARN("{}: a single copy failed while its speed was measured on host {}: auto "
                       "copies through the segments (shm)",
                       core.op(), links.host());
    else
      FLUXCPP_LOG_INFO("{}: a single copy of 1 MiB costs {:.2f} memcpys on host {} (cma below "
                       "FLUXCPP_CMA_MAX_RATIO={}): auto copies {}",
                       core.op(), ratio, links.host(), c.runtime().config().cma_max_ratio,
                       faster_ ? "by single copy (cma)" : "through the segments (shm)");
    if (!faster_) grant_.reset();
  }
  comm::agree(c.control(), [&] {
    if (c.runtime().config().copy_engine == CopyEngine::kCma && !ok_)
      raise(Errc::kSystem,
            "{}: FLUXCPP_COPY_ENGINE=cma but process_vm_readv between the ranks of host {} is "
            "not permitted (ptrace policy); use auto or shm",
            core.op(), links.host());
  });
}

void SingleCopy::pull(OpCore& core, const std::function<void(int q, int g)>& read) {
  const Links& links = core.links();
  const int me = links.local(), r = links.rank();
  const std::vector<int>& ring = links.host_ring();  // local ranks me+1, ..., me-1
  const uint64_t e = core.epoch();
  std::exception_ptr failed;
  for (int g : ring) {
    const int q = links.link(g).local;
    try {
      if (!failed) {
        read(q, g);
        // An owner that gave up waiting for us (timeout) may have let its caller reuse its
        // memory before our read: it withdraws the call first, so a read checked after it is
        // valid.
        if (shm::signal_load(withdrawn_.at(q)) >= e)
          raise(Errc::kTimeout, "{}: rank {} withdrew its input before this rank read it (rank {})",
                core.op(), g, r);
      }
    } catch (...) {
      failed = std::current_exception();
    }
    // 2e: read; 2e+1: the read failed. Raised even on failure, so q never waits in vain and
    // learns that this call failed.
    shm::signal_set(done_.at(q, me), 2 * e + (failed ? 1 : 0));
  }
  int failed_reader = -1;
  for (auto it = ring.rbegin(); it != ring.rend(); ++it) {  // me-1, ..., me+1
    const int g = *it, q = links.link(g).local;
    try {
      core.wait(done_.at(me, q), 2 * e, g, done_.label(q));
    } catch (...) {
      shm::signal_set(withdrawn_.at(me), e);  // withdraw: see the reader's check
      throw;
    }
    if (shm::signal_load(done_.at(me, q)) & 1) failed_reader = g;
  }
  if (failed) std::rethrow_exception(failed);
  if (failed_reader >= 0)
    raise(Errc::kSystem, "{}: rank {} could not read this rank's memory (rank {})", core.op(),
          failed_reader, r);
}

}  // namespace fluxcpp::ops
