#include "comm/bounded.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

void wait_bounded(MPI_Request& req, std::chrono::steady_clock::time_point deadline,
                  std::shared_ptr<void> keep, const std::function<std::string()>& what) {
  const auto start = std::chrono::steady_clock::now();
  for (int done = 0, naps = 0;;) {
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      new std::shared_ptr<void>(std::move(keep));  // deliberately never freed: see the header
      throw Error(Errc::kTimeout, what());
    }
    // Peers usually arrive within microseconds; after 200 us back off to short sleeps so that a
    // rank waiting for a late peer does not take the core from it.
    if (now - start < std::chrono::microseconds(200)) {
      sched_yield();
    } else {
      timespec ts{0, (1L << std::min(7, naps++ / 16)) * 1000L};
      nanosleep(&ts, nullptr);
    }
  }
}

}  // namespace fluxcpp::comm
