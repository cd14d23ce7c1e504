// AllToAllTransposeGemm (private part; Ulysses, after attention). See
// include/fluxcpp/ulysses.hpp for the contract and docs/ops/a2a_transpose_gemm.md for the
// pipeline.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/parts.hpp"
#include "fluxcpp/ulysses.hpp"
#include "kernels/gemm.hpp"
#include "ops/core/a2a_exchange.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_core.hpp"
#include "ops/ulysses_shapes.hpp"

namespace fluxcpp::detail {

class A2aTransposeGemmImpl : public ops::OpBase<A2aTransposeGemmOptions> {
 public:
  static constexpr const char* kOp = "a2a_transpose_gemm";
  using OpBase::OpBase;
  // The collective create (ops::make_op runs it). local_error: see ops::make_op.
  void create(const comm::Parts& c, const std::string& local_error);

  void forward(const void* input, int64_t bs, int64_t seq, const void* weight, const void* bias,
               void* output, void* a2a_output);
  void forward_comm_only(const void* input, int64_t bs, int64_t seq, void* a2a_output);
  void forward_gemm_only(int64_t bs, int64_t seq, const void* weight, const void* bias,
                         void* output);

  // How a call runs, chosen by A2aTransposeGemmImpl::plan from the call's shape and path, the
  // op's shape and the host layout: agreed values, so every rank takes the same schedule (and the
  // split into GEMM calls, and so the bits, follow from it). gemm-only runs the schedule's GEMMs
  // over the rows the last exchange left; comm-only kTiles' exchange.
  struct Schedule {
    enum class Kind {
      kTiles,     // row tile by row tile: the tile exchanged, then its GEMM over all of K
      kBySource,  // across hosts: the GEMM split along K by source, each part as its rows land
    };
    Kind kind = Kind::kTiles;
    ops::Path path = ops::Path::kFused;  // which steps run: all, the GEMMs, the exchange
    int64_t tile = 1;                    // rows of an exchanged tile (kTiles: of a GEMM call)
    bool offload = false;  // kTiles: a comm stream exchanges the tiles (copy offload; rank-local)
  };
  // The schedule of a call of bs x seq on `path`, and the last call's.
  Schedule plan(ops::Path path, int64_t bs, int64_t seq) const;
  const Schedule& last_schedule() const { return schedule_; }

 private:
  struct Args : ops::UlyssesCall {
    char* a2a;              // the exchanged rows [bs · seq/W, nheads · head_dim]
    char* moved = nullptr;  // comm-only: where the caller wants them, or NULL
  };
  // The sizes of the current call's rows and blocks (set by call()).
  struct Sizes {
    ops::UlyssesDims d;
    int64_t K;                                // nheads · head_dim
    std::size_t run_bytes, blk_row, a2a_row;  // a head's run; a block's row; an a2a row
    std::size_t blk, out_row;                 // a block; an output row
  };
  void call(ops::Path path, ops::CallDescriptor& d, const Args& a);
  void run(const Schedule& s, const Args& a);
  // One function per schedule (a2a_transpose_gemm.cpp), and the steps they share.
  void run_tiles(const Schedule& s, const Args& a);
  void run_tiles_offloaded(const Schedule& s, const Args& a);
  void run_by_source(const Schedule& s, const Args& a);
  void run_comm_only(const Schedule& s, const Args& a);
  void run_gemm_only(const Schedule& s, const Args& a);
  // The GEMM split along K by source: own columns first, then each source's in the exchange's
  // receive order, in fixed row tiles (`arrives`: peers' rows are taken as they land).
  void gemm_by_source(const Args& a, bool arrives);
  // Rows [i0, i1) of what we send rank t, packed at `to`, rows `ld` bytes apart.
  void pack(const Args& a, int t, int64_t i0, int64_t i1, char* to, std::size_t ld) const;
  // Rows [i0, i1) of source s's block into a2a's column group s.
  void take(const Args& a, int s, const char* from, int64_t i0, int64_t i1) const;
  // Every peer's block packed and published tile by tile, in the exchange's send order.
  void pack_targets(const Schedule& s, const Args& a);
  // Everything exchanged tile j needs: our own rows, then every source's as they land.
  void exchange_tile(const Schedule& s, const Args& a, int64_t j, const std::atomic<bool>* stop);
  void gemm_tile(const Schedule& s, const Args& a, int64_t j);
  int64_t tiles(const Schedule& s) const { return (sz_.d.rows + s.tile - 1) / s.tile; }

  Schedule schedule_;  // the current (or last) call's
  Sizes sz_{};         // the current call's
  kernels::GemmWeight weight_;
  std::vector<char> a2a_buf_;  // the exchanged rows when the caller does not ask for them
  // a2a-out: the rows this rank packed for each rank t (at t * block), read in place by host
  // peers, sent by the network to other hosts' ranks.
  ops::A2aExchange a2a_;
};

}  // namespace fluxcpp::detail
