// The group's fluxcpp context, from the store torch hands the backend: on one host through
// fluxcpp's unique id (rank 0 puts it in the store), and when the job was started by mpirun
// through an MPI communicator of the group's ranks (MPI then carries the legs between hosts).
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
