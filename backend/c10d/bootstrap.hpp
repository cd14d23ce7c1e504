// The group's fluxcpp context, from the store torch hands the backend, through the C ABI's
// fluxcpp_context_create_from_store whatever launched the job (mpirun included): the library
// chooses the network (shared memory on a host, its TCP channel between hosts). The backend
// makes no MPI call and includes no <mpi.h> (FLUXCPP_NO_MPI).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "fluxcpp/fluxcpp.h"

namespace fluxcpp::backend {

// Collective over the group's ranks. Throws Failure (the library's error, or a store wait that
// timed out) on failure.
fluxcpp_context_t make_context(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                               std::chrono::milliseconds timeout);

}  // namespace fluxcpp::backend
