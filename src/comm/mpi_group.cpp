#include "comm/mpi_group.hpp"

#include <cstdint>

#include "comm/bounded.hpp"
#include "comm/mpi_util.hpp"
#include "error_util.hpp"

namespace fluxcpp::comm {

MpiGroup::MpiGroup(MPI_Comm comm) : comm_(comm) {
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

void MpiGroup::allgather(const void* mine, void* all, std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(INT32_MAX))
    raise(Errc::kInternal, "allgather of {} bytes per rank", bytes);
  comm::allgather(mine, all, static_cast<int>(bytes), MPI_BYTE, comm_);
}

void MpiGroup::check_in(uint64_t token, const char* step, const std::function<int(int)>& name_of) {
  comm::check_in(comm_, token, step, name_of);
}

void MpiGroup::agree(const std::function<void()>& fn) {
  comm::agree(comm_, fn);
}

void MpiGroup::agree_values(const char* op, const char* const* names, const long long* values,
                            int n) {
  comm::agree_values(comm_, op, names, values, n);
}

}  // namespace fluxcpp::comm
