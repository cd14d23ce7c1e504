// Cross-memory attach: single-copy reads from a peer process's memory (process_vm_readv), the
// same mechanism MPI's shared-memory transport uses for large messages. Needs ptrace permission
// over the peer (same user; no restrictive Yama policy), so it is probed before use.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace fluxcpp::shm {

// Copies `bytes` from address `remote` of process `pid` into `dst`. Raises Error(kSystem) naming
// the peer on failure.
void cma_read(pid_t pid, uint64_t remote, void* dst, std::size_t bytes);

// True if cma_read from `pid` works: reads 8 bytes at `remote` and compares them with
// `expected` (the caller sees the same memory through a shared mapping).
bool cma_probe(pid_t pid, uint64_t remote, uint64_t expected) noexcept;

// Lets any process of this user read our memory when the Yama policy is "restricted"
// (PR_SET_PTRACER_ANY). Best effort.
void cma_allow_peers() noexcept;

}  // namespace fluxcpp::shm
