// The launch guard of context create (docs/api.md, "Status, version, context").
#pragma once

#include <mpi.h>

namespace fluxcpp::comm {

// kInvalidUsage when `user_comm` is MPI_COMM_WORLD of one rank while the launcher's environment
// says it started more processes (they were not started as one MPI job).
void check_launch(MPI_Comm user_comm, int size);

}  // namespace fluxcpp::comm
