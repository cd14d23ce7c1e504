// AllGather (private part). See include/fluxcpp/all_gather.hpp for the contract and
// docs/ops/all_gather.md for the algorithm.
#pragma once

#include <sys/types.h>
#include <atomic>

#include <memory>
#include <vector>

#include "comm/context_impl.hpp"
#include "comm/mpi_util.hpp"
#include "fluxcpp/all_gather.hpp"
#include "ops/call_sync.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::detail {

class AllGatherImpl {
 public:
  // local_error: see ContextImpl.
  AllGatherImpl(std::shared_ptr<ContextImpl> ctx, const AllGatherOptions& options,
                const std::string& local_error = {});
  ~AllGatherImpl();

  void forward(const void* input, int64_t m, void* output);
  const AllGatherOptions& options() const { return opts_; }

 private:
  std::string validate(const void* input, int64_t m, const void* output) const;
  void run(const char* input, int64_t m, char* output);
  void start_rail(std::size_t shard);
  void abandon(std::vector<MPI_Request>& reqs, std::size_t nrecv) noexcept;
  uint64_t num_chunks(std::size_t shard) const;
  void finish_rail();
  char* region(int local, int node) const;
  shm::Signal& progress(int local, int node) const;
  shm::Signal& done(int owner, int reader) const;
  void wait_block(int q, int node, uint64_t want, std::chrono::steady_clock::time_point deadline,
                  const char* what);
  void gather_cma(const char* input, std::size_t shard, char* output);
  void gather_shm(const char* input, std::size_t shard, char* output, bool prestaged);

  std::shared_ptr<ContextImpl> ctx_;
  AllGatherOptions opts_;
  std::size_t max_shard_ = 0;  // bytes of one rank's block at max_m
  std::size_t slot_ = 0;       // bytes reserved per block in the segment (page aligned)
  std::size_t data_off_ = 0;   // where the blocks start in the segment
  shm::SymmetricBuffer buf_;
  ops::CallSync sync_;
  comm::UniqueComm rail_;  // own dup of the context's rail communicator (multi-host)
  uint64_t epoch_ = 0;
  bool broken_ = false;
  std::atomic<bool> abort_{false};
  uint64_t rail_ticket_ = 0;
  std::vector<pid_t> pids_;  // of the node ranks
  bool cma_ok_ = false;      // process_vm_readv works between every pair of node ranks
  // An abandoned MPI transfer may still write into (or read from) our segment: keep it mapped
  // forever rather than let MPI touch freed memory.
  bool poisoned_ = false;
};

}  // namespace fluxcpp::detail
