// MpiGroup: the control plane (comm/group.hpp) over an MPI communicator, its collectives bounded
// by the current DeadlineScope (comm/bounded.hpp).
#pragma once

#include <mpi.h>

#include "comm/group.hpp"

namespace fluxcpp::comm {

// The group over `comm` (not owned: the context frees it).
class MpiGroup : public Group {
 public:
  explicit MpiGroup(MPI_Comm comm);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* mine, void* all, std::size_t bytes) override;
  void check_in(uint64_t token, const char* step,
                const std::function<int(int)>& name_of = {}) override;
  void agree(const std::function<void()>& fn) override;
  void agree_values(const char* op, const char* const* names, const long long* values,
                    int n) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace fluxcpp::comm
