// Fault injection for the failure tests: FLUXCPP_TEST_FAULT=POINT:RANK[:ACTION[:NTH]] makes world
// rank RANK, the NTH time (default 1) it passes POINT, SIGKILL itself (ACTION kill, the default)
// or SIGSTOP itself (stop: a rank that hangs). Points: "bootstrap" (an op's segment created,
// its name not yet removed), "forward" (inside an op call, after the handshake), "create"
// (inside an op create, before its segment exists). Honoured only by a library configured with
// FLUXCPP_FAULT_INJECTION=ON (scripts/test.sh does); any other build ignores it. Unset: one load
// of a cached flag. Layer-free.
#pragma once

namespace fluxcpp {

void fault_point(const char* point, int world_rank) noexcept;

}  // namespace fluxcpp
