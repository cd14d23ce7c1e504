// Non-blocking MPI collectives waited for with a deadline. MPI cannot cancel a collective, so a
// request that did not complete in time is abandoned: the buffers it uses are leaked on purpose
// (MPI may still write into them) and the caller must treat the communicator as unusable.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace fluxcpp::comm {

// Tests `req` until it completes (yielding the core in between) or `deadline` passes; then
// leaks `keep` and raises kTimeout with the message `what()` returns.
void wait_bounded(MPI_Request& req, std::chrono::steady_clock::time_point deadline,
                  std::shared_ptr<void> keep, const std::function<std::string()>& what);

}  // namespace fluxcpp::comm
