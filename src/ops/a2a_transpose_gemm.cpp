#include "ops/a2a_transpose_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/tiled_gemm.hpp"
#include "ops/ulysses_shapes.hpp"

namespace fluxcpp {
namespace detail {

void A2aTransposeGemmImpl::create(const comm::Parts& c, const std::string& local_error) {
  const A2aTransposeGemmOptions o = opts_;
  ops::ulysses_check_create(c, kOp, o.max_bs, o.max_seq, o.nheads, o.head_dim, o.input_dtype,
                            o.output_dtype, {"n", o.n}, /*own_is_k=*/false, local_error);
  const int W = c.topo().world_size();
  const ops::UlyssesDims d = ops::ulysses_dims(W, o.max_bs, o.max_seq, o.nheads, o.head_dim);
  const std::size_t esz = dtype_size(o.input_dtype);
  const std::size_t blk = static_cast<std::size_t>(d.rows * d.cols) * esz;
  a2a_ = ops::A2aExchange(links_, layout_, blk * W, blk * W, ops::needs_data(links_));
  make_core(ops::OpCore::Spec::of(kOp, {"bs", "seq"}).runs_gemm());
  comm::agree(c.control(), [&] {
    resize_or_raise(a2a_buf_, static_cast<std::size_t>(d.rows) * o.nheads * o.head_dim * esz, kOp,
                    "the exchanged rows");
  });
}

void A2aTransposeGemmImpl::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                                   const void* bias, void* output, void* a2a_output) {
  ops::CallDescriptor d;
  d.fields = {bs, seq, 0, 0};
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"input", input}, {"weight", weight}, {"output", output}});
  char* a2a = a2a_output != nullptr ? static_cast<char*>(a2a_output) : a2a_buf_.data();
  call(ops::Path::kFused, d,
       {{static_cast<const char*>(input), bs, seq, weight, bias, static_cast<char*>(output)}, a2a});
}

void A2aTransposeGemmImpl::forward_comm_only(const void* input, int64_t bs, int64_t seq,
                                             void* a2a_output) {
  ops::CallDescriptor d;
  d.fields = {bs, seq, 0, 0};
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"input", input}});
  call(ops::Path::kCommOnly, d,
       {{static_cast<const char*>(input), bs, seq, nullptr, nullptr, nullptr},
        a2a_buf_.data(),
        static_cast<char*>(a2a_output)});
}

void A2aTransposeGemmImpl::forward_gemm_only(int64_t bs, int64_t seq, const void* weight,
                                             const void* bias, void* output) {
  ops::CallDescriptor d;
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"weight", weight}, {"output", output}});
  call(ops::Path::kGemmOnly, d,
       {{nullptr, bs, seq, weight, bias, static_cast<char*>(output)}, a2a_buf_.data()});
}

A2aTransposeGemmImpl::Schedule A2aTransposeGemmImpl::plan(ops::Path path, int64_t bs,
                                                          int64_t seq) const {
  const int W = ctx_->topo().world_size();
  const ops::UlyssesDims d = ops::ulysses_dims(W, bs, seq, opts_.nheads, opts_.head_dim);
  Schedule s;
  s.path = path;
  // Row tiles: each GEMM call packs the whole weight again (n x nheads·head_dim), so tiles stay
  // large (at least 256 rows, at most 4), and there is a single one when the weight is at least
  // as wide as a tile is tall (then the packs would cost more than the pipelining wins).
  s.tile = std::max<int64_t>(256, (d.rows + 3) / 4);
  if (opts_.n >= s.tile) s.tile = std::max<int64_t>(d.rows, 1);
  // Across hosts the GEMM goes by source (gemm-only too: the same GEMM calls, the same bits); a
  // bf16 output cannot accumulate the parts.
  if (path != ops::Path::kCommOnly && a2a_.networked() && opts_.output_dtype != DType::kBFloat16)
    s.kind = Schedule::Kind::kBySource;
  const int64_t tiles = (d.rows + s.tile - 1) / s.tile;
  s.offload = path == ops::Path::kFused && s.kind == Schedule::Kind::kTiles &&
              ctx_->runtime().config().copy_offload && tiles > 1 && W > 1;
  return s;
}

void A2aTransposeGemmImpl::call(ops::Path path, ops::CallDescriptor& d, const Args& a) {
  if (d.error.empty()) schedule_ = plan(path, a.bs, a.seq);
  core_->run(path, d, a.bs * a.seq == 0, [&](const ops::Call&) { run(schedule_, a); });
}

void A2aTransposeGemmImpl::run(const Schedule& s, const Args& a) {
  const int W = ctx_->topo().world_size();
  Sizes& z = sz_;
  z.d = ops::ulysses_dims(W, a.bs, a.seq, opts_.nheads, opts_.head_dim);
  z.K = opts_.nheads * opts_.head_dim;
  const std::size_t esz = dtype_size(opts_.input_dtype);
  z.run_bytes = static_cast<std::size_t>(z.d.head_dim) * esz;
  z.blk_row = static_cast<std::size_t>(z.d.cols) * esz;
  z.a2a_row = z.K * esz;
  z.blk = static_cast<std::size_t>(z.d.rows) * z.blk_row;
  z.out_row = static_cast<std::size_t>(opts_.n) * dtype_size(opts_.output_dtype);
  if (s.path == ops::Path::kCommOnly) return run_comm_only(s, a);
  if (s.path == ops::Path::kGemmOnly) return run_gemm_only(s, a);
  switch (s.kind) {
    case Schedule::Kind::kTiles: return s.offload ? run_tiles_offloaded(s, a) : run_tiles(s, a);
    case Schedule::Kind::kBySource: return run_by_source(s, a);
  }
}

void A2aTransposeGemmImpl::run_tiles(const Schedule& s, const Args& a) {
  a2a_.begin(*core_, ops::equal_blocks(sz_.blk));
  weight_.prepare(opts_.input_dtype, a.weight, opts_.n, sz_.K, false);
  pack_targets(s, a);
  for (int64_t j = 0; j < tiles(s); ++j) {
    exchange_tile(s, a, j, nullptr);
    gemm_tile(s, a, j);
  }
}

void A2aTransposeGemmImpl::run_tiles_offloaded(const Schedule& s, const Args& a) {
  // Copy offload: a comm stream exchanges tile after tile, raising `ready`, while this thread
  // runs the GEMM of every tile that is ready.
  const comm::Parts& c = *ctx_;
  a2a_.begin(*core_, ops::equal_blocks(sz_.blk));
  weight_.prepare(opts_.input_dtype, a.weight, opts_.n, sz_.K, false);
  pack_targets(s, a);
  const int64_t tiles = this->tiles(s);
  shm::Signal ready;
  constexpr uint64_t kFailed = ~uint64_t{0};
  ops::Offload copies(c);
  copies.start([&] {
    try {
      for (int64_t j = 0; j < tiles; ++j) {
        exchange_tile(s, a, j, copies.stop());
        shm::signal_set(ready, static_cast<uint64_t>(j + 1));
      }
    } catch (...) {
      shm::signal_set(ready, kFailed);
      throw;
    }
  });
  for (int64_t j = 0; j < tiles; ++j) {
    // No time limit here: every wait of the task has its own, and a failed task raises
    // `ready` to kFailed.
    shm::signal_wait(ready, static_cast<uint64_t>(j + 1),
                     std::chrono::steady_clock::time_point::max(), c.runtime().wait_policy());
    if (shm::signal_load(ready) == kFailed) {
      copies.finish();  // rethrows the copy task's error
      raise(Errc::kInternal, "{}: the copy stream failed at tile {} (rank {})", kOp, j,
            c.topo().world_rank());
    }
    gemm_tile(s, a, j);
  }
  copies.finish();
}

void A2aTransposeGemmImpl::run_by_source(const Schedule& s, const Args& a) {
  // The peers' blocks packed tile by tile as kTiles packs them; our own rows straight into their
  // column group; the peers' rows are taken as they land.
  a2a_.begin(*core_, ops::equal_blocks(sz_.blk));
  pack_targets(s, a);
  const int r = ctx_->topo().world_rank();
  pack(a, r, 0, sz_.d.rows, a.a2a + r * sz_.blk_row, sz_.a2a_row);
  gemm_by_source(a, /*arrives=*/true);
}

void A2aTransposeGemmImpl::run_comm_only(const Schedule& s, const Args& a) {
  // kTiles' exchange into our buffer (where gemm-only finds the rows), then to the caller.
  a2a_.begin(*core_, ops::equal_blocks(sz_.blk));
  pack_targets(s, a);
  for (int64_t j = 0; j < tiles(s); ++j) exchange_tile(s, a, j, nullptr);
  if (a.moved != nullptr)
    std::memcpy(a.moved, a.a2a, static_cast<std::size_t>(sz_.d.rows) * sz_.a2a_row);
}

void A2aTransposeGemmImpl::run_gemm_only(const Schedule& s, const Args& a) {
  // The schedule's GEMMs over the rows the last exchange left.
  if (s.kind == Schedule::Kind::kBySource) return gemm_by_source(a, /*arrives=*/false);
  weight_.prepare(opts_.input_dtype, a.weight, opts_.n, sz_.K, false);
  for (int64_t j = 0; j < tiles(s); ++j) gemm_tile(s, a, j);
}

void A2aTransposeGemmImpl::gemm_by_source(const Args& a, bool arrives) {
  // out = Σ_s a2a[:, cols of s] · weight[:, cols of s]ᵀ: our own source first, then the sources
  // in the exchange's receive order (this host's land at memory speed while the other hosts' are
  // still on the link), each in fixed row tiles as its rows land. gemm-only runs the same
  // sequence over the rows in place, so a forward and gemm-only make the same GEMM calls and
  // their bits match.
  const ops::UlyssesDims& d = sz_.d;
  const int r = ctx_->topo().world_rank();
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  kernels::GemmWeight slice;
  const int64_t rtile = ops::fixed_tile_rows(opts_.n, d.cols);
  bool first = true;
  auto source = [&](int s) {
    slice.prepare(opts_.input_dtype, static_cast<const char*>(a.weight) + s * sz_.blk_row, opts_.n,
                  d.cols, false, sz_.K);
    const bool lands = arrives && s != r;  // a peer's rows come in; ours are in place
    const ops::Inbox in = lands ? a2a_.from(s) : ops::Inbox();
    for (int64_t i0 = 0; i0 < d.rows; i0 += rtile) {
      const int64_t i1 = std::min(d.rows, i0 + rtile);
      if (lands) {
        in.wait(static_cast<std::size_t>(i1) * sz_.blk_row);
        take(a, s, in.data(), i0, i1);
      }
      o.c = a.output + static_cast<std::size_t>(i0) * sz_.out_row;
      o.bias = first ? a.bias : nullptr;
      o.accumulate = !first;
      ops::tiled_gemm(*core_, slice,
                      a.a2a + static_cast<std::size_t>(i0) * sz_.a2a_row + s * sz_.blk_row, sz_.K,
                      i1 - i0, 0, opts_.n, o, {}, ops::Tiling::kFixed);
    }
    first = false;
  };
  source(r);
  for (int s : a2a_.sources()) source(s);
}

void A2aTransposeGemmImpl::pack(const Args& a, int t, int64_t i0, int64_t i1, char* to,
                                std::size_t ld) const {
  // Row i = (b, t') holds input[b][h][t·seq/W + t'][:] for every local head h, i.e. the layout of
  // a2a_output's column group.
  const ops::UlyssesDims& d = sz_.d;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t b = i / d.s_loc, tl = i % d.s_loc;
    for (int64_t h = 0; h < d.heads_loc; ++h)
      std::memcpy(to + static_cast<std::size_t>(i) * ld + h * sz_.run_bytes,
                  a.input + (static_cast<std::size_t>(b * d.heads_loc + h) * d.seq +
                             static_cast<std::size_t>(t) * d.s_loc + tl) *
                                sz_.run_bytes,
                  sz_.run_bytes);
  }
}

void A2aTransposeGemmImpl::take(const Args& a, int s, const char* from, int64_t i0,
                                int64_t i1) const {
  for (int64_t i = i0; i < i1; ++i)
    std::memcpy(a.a2a + static_cast<std::size_t>(i) * sz_.a2a_row + s * sz_.blk_row,
                from + i * sz_.blk_row, sz_.blk_row);
}

void A2aTransposeGemmImpl::pack_targets(const Schedule& s, const Args& a) {
  // Other hosts' ranks first: the transport sends each part as it is published.
  for (int t : a2a_.targets()) {
    const ops::Outbox box = a2a_.to(t);
    for (int64_t j = 0; j < tiles(s); ++j) {
      const int64_t i1 = std::min(sz_.d.rows, (j + 1) * s.tile);
      pack(a, t, j * s.tile, i1, box.data(), sz_.blk_row);
      box.publish(static_cast<std::size_t>(i1) * sz_.blk_row);
    }
  }
}

void A2aTransposeGemmImpl::exchange_tile(const Schedule& s, const Args& a, int64_t j,
                                         const std::atomic<bool>* stop) {
  // Our own rows, then every source's rows of the tile as they land, in the exchange's receive
  // order. `stop`: see Offload.
  const int r = ctx_->topo().world_rank();
  const int64_t i0 = j * s.tile, i1 = std::min(sz_.d.rows, i0 + s.tile);
  pack(a, r, i0, i1, a.a2a + r * sz_.blk_row, sz_.a2a_row);
  for (int src : a2a_.sources()) {
    const ops::Inbox in = a2a_.from(src);
    in.wait(static_cast<std::size_t>(i1) * sz_.blk_row, stop);
    take(a, src, in.data(), i0, i1);
  }
}

void A2aTransposeGemmImpl::gemm_tile(const Schedule& s, const Args& a, int64_t j) {
  const int64_t i0 = j * s.tile, i1 = std::min(sz_.d.rows, i0 + s.tile);
  kernels::GemmOut o;
  o.c = a.output + static_cast<std::size_t>(i0) * sz_.out_row;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = a.bias;
  ops::tiled_gemm(*core_, weight_, a.a2a + static_cast<std::size_t>(i0) * sz_.a2a_row, sz_.K,
                  i1 - i0, 0, opts_.n, o);
}

}  // namespace detail

// The public class A2aTransposeGemm (include/fluxcpp/a2a_transpose_gemm.hpp): each member forwards
// to the implementation above, through ops::checked (a moved-from op is kInvalidUsage).
FLUXCPP_PUBLIC_MADE_OP(A2aTransposeGemm, A2aTransposeGemmOptions);
void A2aTransposeGemm::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                               const void* bias, void* output, void* a2a_output) {
  ops::checked(impl_).forward(input, bs, seq, weight, bias, output, a2a_output);
}
void A2aTransposeGemm::forward_comm_only(const void* input, int64_t bs, int64_t seq,
                                         void* a2a_output) {
  ops::checked(impl_).forward_comm_only(input, bs, seq, a2a_output);
}
void A2aTransposeGemm::forward_gemm_only(int64_t bs, int64_t seq, const void* weight,
                                         const void* bias, void* output) {
  ops::checked(impl_).forward_gemm_only(bs, seq, weight, bias, output);
}

}  // namespace fluxcpp
