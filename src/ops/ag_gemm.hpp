// AGKernel (private part). See include/fluxcpp/ag_gemm.hpp for the contract and
// docs/ops/ag_gemm.md for the pipeline.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/ag_gemm.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm_packed_weight.hpp"
#include "ops/core/gather_exchange.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/gemm_op.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_core.hpp"
#include "ops/core/zero_copy.hpp"

namespace fluxcpp::detail {

class AgGemmImpl : public ops::GemmOpBase<AgGemmImpl, AgGemmOptions> {
 public:
  static constexpr const char* kOp = "ag_gemm";
  using GemmOpBase::GemmOpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  // How an AGKernel call runs, chosen by AgGemmImpl::plan from the call's m and path, the op's
  // settings and the host layout: agreed values, so every rank takes the same schedule (and the
  // split into GEMM calls, and so the bits, follow from it). gemm-only runs a schedule's GEMM
  // steps on whatever the buffers hold; comm-only runs kGather's movement steps alone.
  struct Schedule {
    enum class Kind {
      kLatency,      // every host rank's rows rode on the handshake; one GEMM over all of them
      kInPlace,      // own rows first, then each peer's rows read in place as they land
      kGather,       // the host's rows gathered, one GEMM per run; other hosts' rows as they land
      kGatherWhole,  // every rank's rows gathered first, then one GEMM
    };
    Kind kind = Kind::kGather;
    ops::Path path = ops::Path::kFused;  // which steps run: all, the GEMM's, the movement's
    bool offload = false;  // a comm stream stages this rank's rows (copy offload; rank-local)
  };

  using GemmOpBase::forward;
  // weight given packed (fluxcpp/packed_weight.hpp) instead of as it lies.
  void forward(const void* input, int64_t m, const kernels::PackedWeight& weight, const void* bias,
               void* output, void* gathered_input) {
    ops::GemmCall a = ops::GemmCall::fused(input, m, &weight, bias, output, gathered_input);
    a.packed = &weight;
    call(ops::Path::kFused, a);
  }

  // GemmOpBase's hooks.
  char* input_slot() { return gather_.staged_slot(); }
  std::size_t input_bytes(std::size_t m) const {
    return m / static_cast<std::size_t>(ctx_->topo().world_size()) * in_row_;
  }
  void schedule(ops::Path path, const ops::GemmCall& a) { schedule_ = plan(path, a); }
  void latency_payload(const ops::GemmCall& a, ops::CallDescriptor& d);
  void run(const ops::Call& call, const ops::GemmCall& a);
  AgGemmMode mode() const { return mode_; }

  // The schedule of a call on `path` (rank-local parts: a.zero_copy), and the last call's.
  Schedule plan(ops::Path path, const ops::GemmCall& a) const;
  const Schedule& last_schedule() const { return schedule_; }
  // For tests that compare the two paths bit for bit: false sends every later call down the normal
  // path. Process-wide; set it alike on every rank, between calls.
  static void enable_latency_path(bool on) { latency_enabled_.store(on); }

 private:
  // C rows [0, rows) of the output block at `out` from A rows at `a`, over the compute workers,
  // in tiles with transfer progress in between while transfers are pending.
  // tiles = false: one call (over the compute workers), nothing in flight to progress.
  void gemm(const char* a, int64_t rows, const void* bias, char* out, bool tiles = true);
  // Whether a call with `rows` rows per rank gathers the host's rows before one GEMM.
  bool gathers(int64_t rows) const;
  // Whether a fused call of m rows takes the latency path (decided from agreed values: the same
  // on every rank).
  bool latency(int64_t m) const;

  // One function per schedule (ag_gemm.cpp), and the steps they share.
  void run_latency(const ops::GemmCall& a);
  void run_in_place(const Schedule& s, const ops::GemmCall& a);
  void run_gathered(const Schedule& s, const ops::GemmCall& a);  // kGather and kGatherWhole
  void run_comm_only(const ops::GemmCall& a);
  void run_gemm_only(const Schedule& s, const ops::GemmCall& a);
  // Prepares the weight, posts the transfers and publishes this rank's rows (on `copies`' comm
  // stream with offload).
  void stage(const Schedule& s, const ops::GemmCall& a, ops::Offload& copies);
  // Peer g's rows through the GEMM as they land, at least a row tile at a time.
  void gemm_as_landed(int g, const ops::GemmCall& a);
  // One GEMM per run of consecutive host ranks over the host's rows gathered in `local`.
  void gemm_host_runs(const ops::GemmCall& a, const char* local);
  // The gathered input for the caller, when asked for (`local`: the host's rows, if gathered).
  void copy_out(const ops::GemmCall& a, const char* local);
  int64_t rows(const ops::GemmCall& a) const { return a.m / ctx_->topo().world_size(); }
  std::size_t block(const ops::GemmCall& a) const {
    return static_cast<std::size_t>(rows(a)) * in_row_;
  }
  char* out_block(const ops::GemmCall& a, int g) const {
    return a.output + static_cast<std::size_t>(g) * rows(a) * out_row_;
  }

  static inline std::atomic<bool> latency_enabled_{true};
  AgGemmMode mode_ = AgGemmMode::kAuto;
  Schedule schedule_;  // the current (or last) call's
  ops::GatherExchange gather_;
};

}  // namespace fluxcpp::detail
