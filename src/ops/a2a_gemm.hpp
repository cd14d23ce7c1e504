// All-to-all + GEMM (private part). See include/fluxcpp/a2a_gemm.hpp for the contract and
// docs/ops/a2a_gemm.md for the pipeline.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/a2a_gemm.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/gemm_op.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class A2aGemmImpl : public ops::GemmOpBase<A2aGemmImpl, A2aGemmOptions> {
 public:
  static constexpr const char* kOp = "a2a_gemm";
  using GemmOpBase::GemmOpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // How an A2aGemm call runs, chosen by A2aGemmImpl::plan from the call's m and path and the
  // op's shape: agreed values, so every rank takes the same schedule (and the split into GEMM
  // calls, and so the bits, follow from it). gemm-only runs a schedule's GEMM steps on whatever
  // the buffers hold; comm-only its movement steps.
  struct Schedule {
    enum class Kind {
      kInPlace,  // own block first, then each peer's block read in place as its rows land
      kGather,   // every block gathered into one buffer, then one GEMM over all m rows
    };
    Kind kind = Kind::kInPlace;
    ops::Path path = ops::Path::kFused;  // which steps run: all, the GEMM's, the movement's
    bool offload = false;  // a comm stream stages this rank's blocks (copy offload; rank-local)
  };

  // GemmOpBase's hooks.
  char* input_slot() { return a2a_.out_slot(); }
  std::size_t input_bytes(std::size_t m) const { return m * in_row_; }
  void schedule(ops::Path path, const ops::GemmCall& a) { schedule_ = plan(path, a); }
  void run(const ops::Call& call, const ops::GemmCall& a);

  // The schedule of a call on `path` (rank-local parts: a.zero_copy), and the last call's.
  Schedule plan(ops::Path path, const ops::GemmCall& a) const;
  const Schedule& last_schedule() const { return schedule_; }

 private:
  // Equal blocks: block t of a rank's input at t * blk, rank s's block at s * blk of a2a-in.
  static ops::A2aExchange::Plan blocks(std::size_t blk);

  // One function per schedule (a2a_gemm.cpp), and the steps they share.
  void run_in_place(const Schedule& s, const ops::GemmCall& a);
  void run_gathered(const Schedule& s, const ops::GemmCall& a);
  void run_comm_only(const Schedule& s, const ops::GemmCall& a);
  void run_gemm_only(const Schedule& s, const ops::GemmCall& a);
  // Starts the exchange and publishes this rank's blocks (on `copies`' comm stream with offload).
  void stage(const Schedule& s, const ops::GemmCall& a, ops::Offload& copies);
  // f(s, rows, i0, i1) for our own block (whole), then for each peer's rows [i0, i1) as they
  // land (held: as the buffers hold them, without waiting).
  template <class F>
  void each_block(const ops::GemmCall& a, bool held, F&& f);
  // Rows [i0, i1) of block s of the result from `rows` (block s's rows).
  void gemm(const ops::GemmCall& a, int s, const char* rows, int64_t i0, int64_t i1);
  int64_t rows(const ops::GemmCall& a) const { return a.m / ctx_->topo().world_size(); }
  std::size_t block(const ops::GemmCall& a) const {
    return static_cast<std::size_t>(rows(a)) * in_row_;
  }

  Schedule schedule_;  // the current (or last) call's

  // a2a-out: this rank's input staged block by block (block t at t * m/W rows), read in place by
  // host peers' GEMMs and sent by the network (also the zero-copy input buffer); a2a-in: the blocks
  // received from other hosts.
  ops::A2aExchange a2a_;
};

}  // namespace fluxcpp::detail
