// GemmRS (private part). See include/fluxcpp/gemm_rs.hpp for the contract and
// docs/ops/gemm_rs.md for the pipeline.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/gemm_rs.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/reduce_exchange.hpp"

namespace fluxcpp::detail {

class GemmRsImpl : public ops::OpBase<GemmRsOptions> {
 public:
  static constexpr const char* kOp = "gemm_rs";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // How a GemmRS call runs, chosen by GemmRsImpl::plan from the call's m and path, the op's
  // settings and the host layout: agreed values, so every rank takes the same schedule (and the
  // split into GEMM calls, and so the bits, follow from it). gemm-only runs kReduce's GEMM step
  // alone, into the op's buffers; comm-only its reduction of what the buffers hold.
  struct Schedule {
    enum class Kind {
      kLatency,  // the partials rode on the handshake; each rank sums its block from them
      kDirect,   // alone on the host, across hosts: each tile of our block summed as it is done
      kPresum,   // copy offload: a comm stream sums the peers' partials of our block as they land
      kReduce,   // every partial computed and published, then the fixed-order reduce
    };
    Kind kind = Kind::kReduce;
    ops::Path path = ops::Path::kFused;  // which steps run: all, the GEMM's, the reduction's
    bool one_call = false;  // the partials in one GEMM call (else a block per peer, ring order)
  };

  void forward(const void* input, int64_t m, const void* weight, const void* bias, void* output);
  void forward(const void* input, int64_t m, const kernels::PackedWeight& weight, const void* bias,
               void* output);
  void forward_gemm_only(const void* input, int64_t m, const void* weight);
  void forward_comm_only(int64_t m, const void* bias, void* output);

  // The schedule of a call of m rows on `path`, and the last call's.
  Schedule plan(ops::Path path, int64_t m) const;
  const Schedule& last_schedule() const { return schedule_; }

 private:
  // Every call: checked, planned, run by the schedule's function.
  void call(ops::Path path, const ops::GemmCall& a);
  std::string check(ops::Path path, const ops::GemmCall& a) const;
  void run(const Schedule& s, const ops::GemmCall& a);
  // The latency path's payload: this rank's partials of every block, computed as the one-call
  // path computes them.
  void latency_payload(const ops::GemmCall& a, ops::CallDescriptor& d);
  void run_direct(const Schedule& s, const ops::GemmCall& a);
  void run_reduce(const Schedule& s, const ops::GemmCall& a);
  void run_comm_only(const ops::GemmCall& a);
  // The partial products, block by block into the segment (publishing each block a peer
  // reduces, or the transport sends, as soon as it is done) or in one call (s.one_call).
  // own_rows(r0, r1): rows [r0, r1) of our own block are done (direct mode sums them at once).
  void compute(const Schedule& s, const ops::GemmCall& a, bool publish,
               const std::function<void(int64_t r0, int64_t r1)>& own_rows = {});
  // Adds the bias to rows [r0, r1) of our own partial (r1 < 0: to the end of the block), in the
  // segment or in `partials` ([m, n], the latency path's payload).
  void add_bias(int64_t m, const void* bias, int64_t r0 = 0, int64_t r1 = -1,
                char* partials = nullptr);
  // The latency path: our block summed from the host ranks' payloads.
  void sum_payloads(int64_t m, void* output);
  // Starts the reduce exchange of a call with m rows.
  void begin(int64_t m);
  void reduce(int64_t m, void* output);
  // forward with copy offload (one host, three or more ranks): see gemm_rs.cpp.
  void compute_offloaded(const Schedule& s, const ops::GemmCall& a);
  // This rank's partial product of row block t, in the accumulation dtype.
  char* partial(int t, int64_t m) const;

  DType acc_ = DType::kFloat32;
  kernels::GemmWeight weight_;
  Schedule schedule_;  // the current (or last) call's
  // The shares of the reduce exchange are this rank's partial products, [m, n] densely in the
  // accumulation dtype (block t at t * m/W rows).
  ops::ReduceExchange reduce_;
};

}  // namespace fluxcpp::detail
