// Fault injection for the failure tests: FLUXCPP_TEST_FAULT=POINT:RANK[:ACTION[:NTH]] makes world
// rank RANK, the NTH time (default 1) it passes POINT, SIGKILL itself (ACTION kill, the default),
// SIGSTOP itself (stop: a rank that hangs) or sleep 3 s there (delay: a slow rank). Points:
// "bootstrap" (an op's segment created, its name not yet removed), "forward" (inside an op call,
// after the handshake), "create" (inside an op create, before its segment exists),
// "tcp_connect" (a context create, before a TCP pair connects: comm/gloo_auth.cpp). Honoured only by a library configured with
// FLUXCPP_FAULT_INJECTION=ON (scripts/test.sh does); any other build ignores it. Unset: one load
// of a cached flag. Layer-free.
#pragma once

namespace fluxcpp {

void fault_point(const char* point, int world_rank) noexcept;

// FLUXCPP_TEST_SHM_FULL_BYTES=N (same builds only): a shared-memory segment of N bytes or more
// finds /dev/shm full, as on a host whose /dev/shm is (shm/segment.cpp).
bool fault_shm_full(unsigned long long bytes) noexcept;

}  // namespace fluxcpp
