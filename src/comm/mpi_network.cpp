#include "comm/mpi_network.hpp"

#include "comm/mpi_p2p_net.hpp"
#include "comm/mpi_record_swap.hpp"
#include "comm/mpi_transport.hpp"
#include "comm/orphans.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

MpiNetwork::~MpiNetwork() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // communicators died with MPI
  // One that still carries an abandoned collective is freed once that completes (orphans.hpp).
  for (MPI_Comm* c : {&rail_comm_, &host_comm_, &channel_}) free_comm(c);
}

template class NetworkOver<MPI_Comm, MpiTransport, MpiP2pNet>;

std::unique_ptr<RecordSwap> MpiNetwork::rail_swap(const Parts& /*ctx*/, std::string what) {
  return std::make_unique<MpiRecordSwap>(rail_comm_, std::move(what));
}

void MpiNetwork::check_hosts(int num_hosts) const {
  if (num_hosts > 1 && thread_level_ < MPI_THREAD_MULTIPLE)
    raise(Errc::kInvalidUsage,
          "context: ranks span {} hosts, which needs MPI initialised with MPI_THREAD_MULTIPLE "
          "(this rank has thread level {})",
          num_hosts, thread_level_);
}

bool MpiNetwork::usable() const {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized == 0;
}

}  // namespace fluxcpp::comm
