// How fast a single copy (process_vm_readv) is on this host next to memcpy: the measurement
// behind FLUXCPP_COPY_ENGINE=auto. A single copy moves a block once where the staged engine
// copies it twice (into the owner's segment, out of it), but each process_vm_readv pins the
// peer's pages and walks its page tables: on one machine a single copy of 1 MiB cost ~1.5
// memcpys, on another (a VM) ~3.8, where the staged engine was 1.2-1.6x faster.
#pragma once

#include <sys/types.h>

#include <vector>

namespace fluxcpp::shm {

class HostTeam;

// Collective over `team` (every rank of the host, which can all read each other: `pids` as
// cma_probe_team found them). Each rank reads 1 MiB of its next host peer's memory with
// process_vm_readv and copies 1 MiB locally with memcpy, the best of 3 each, all ranks at once;
// returns the mean over the host's ranks of (single copy time / memcpy time), the same value on
// every rank: infinity when a read failed on any rank. A team of one returns 0. (The memcpy runs
// from the cache after its first round, so the ratio leans towards the staged engine; the
// threshold, FLUXCPP_CMA_MAX_RATIO, is what decides.)
double cma_copy_ratio(HostTeam& team, const std::vector<pid_t>& pids);

}  // namespace fluxcpp::shm
