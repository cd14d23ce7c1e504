// MpiRecordSwap: comm/record_swap.hpp's swap over MPI, on a duplicate of the rail communicator
// (collective to make). A member late at the deadline is sent a retraction after our record, so
// that it fails when it arrives.
#pragma once

#include <mpi.h>

#include <string>

#include "comm/mpi_util.hpp"
#include "comm/record_swap.hpp"

namespace fluxcpp::comm {

class MpiRecordSwap : public RecordSwap {
 public:
  // Collective over `base`: duplicates it. `what` names the exchange in the errors of later
  // creates on it (a timed-out swap's orphans).
  MpiRecordSwap(MPI_Comm base, std::string what);

  std::vector<int> swap(const Sends& sends, Deadline deadline, const BackoffPolicy& wait,
                        std::array<int64_t, 2> retraction) override;
  std::vector<std::pair<int, std::array<int64_t, 2>>> retractions() override;
  std::vector<std::string> gather_texts(const std::string& mine, Deadline deadline,
                                        const BackoffPolicy& wait,
                                        const std::function<std::string()>& missing) override;

 private:
  UniqueComm comm_;
};

}  // namespace fluxcpp::comm
