// Single-copy reads within a host (process_vm_readv): a rank reads each host peer's memory
// straight from the peer's address space into its own output, and must not return (letting its
// caller reuse its input) before every peer has finished reading its memory. Shared by AllGather
// and All2AllSingle. Needs ptrace permission between the ranks, probed at create.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "ops/core/op_core.hpp"
#include "shm/cma.hpp"

namespace fluxcpp::ops {

class SingleCopy {
 public:
  SingleCopy() = default;
  // Declares the regions ("read-done[L]", "withdrawn") before the core allocates.
  SingleCopy(const comm::Parts& c, const Links& links, shm::Layout& layout);
  // Collective over the host, after the core allocated the segment: checks that every rank can
  // read every host peer's memory; raises on every rank if FLUXCPP_COPY_ENGINE=cma but it cannot.
  void probe(OpCore& core);
  bool usable() const { return ok_; }
  // Whether a call whose largest host block is `largest_bytes` should read by single copy:
  // usable, and FLUXCPP_COPY_ENGINE=cma, or (auto) the block at least FLUXCPP_CMA_MIN_KB and a
  // single copy measured at probe time cheaper than two memcpys (shm/cma_speed.hpp). Every rank
  // of the host decides alike from the same sizes and the same measurement.
  bool worth(std::size_t largest_bytes) const {
    return ok_ && (forced_ || (faster_ && static_cast<long>(largest_bytes) >= min_bytes_));
  }
  pid_t pid(int local) const { return pids_[local]; }

  // read(q, g) for every host peer, local rank q and world rank g, in ring order (it reads the
  // peer's memory); each peer then learns that this rank is done with its memory, and this rank
  // waits until every peer is done with its own. A failed read on any rank fails the call on
  // both ends.
  void pull(OpCore& core, const std::function<void(int q, int g)>& read);

 private:
  shm::SignalArray done_;       // [L]: done[q] in the owner's segment, as 2 * call (+1: failed)
  shm::SignalArray withdrawn_;  // [1]: the owner gave up waiting at this call
  std::vector<pid_t> pids_;
  bool ok_ = false;
  bool forced_ = false;  // FLUXCPP_COPY_ENGINE=cma
  bool faster_ = false;  // auto: the probe found a single copy cheaper than two memcpys
  long min_bytes_ = 0;   // FLUXCPP_CMA_MIN_KB
  shm::PtracerGrant grant_;  // held while single copies may be used
};

}  // namespace fluxcpp::ops
