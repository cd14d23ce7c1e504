// The one step of the abandoned-request registry (comm/orphans.hpp) that code without MPI takes:
// an op's create lets what earlier creates abandoned complete before it runs its own
// collectives. Nothing to do in a process whose contexts never used MPI.
#pragma once

namespace fluxcpp::comm {

// Tests every orphan once; a completed one is released. Returns how many are still pending.
int progress_orphans() noexcept;

}  // namespace fluxcpp::comm
