// fluxcpp/context_mpi.hpp: a Context made from an MPI communicator (fluxcpp/context.hpp's
// Context(const MpiComm&, ...)): `fluxcpp::Context ctx(MPI_COMM_WORLD)`. The one public C++
// header that includes <mpi.h>; the umbrella fluxcpp/fluxcpp.hpp includes it.
#pragma once

#include <mpi.h>

#include "fluxcpp/context.hpp"

namespace fluxcpp {

// The caller's communicator, unowned: the context duplicates it during construction and never
// uses it afterwards. Implicit, so that an MPI_Comm is passed as it is.
struct MpiComm {
  MpiComm(MPI_Comm c) : comm(c) {}
  MPI_Comm comm;
};

}  // namespace fluxcpp
