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
  core_->run(ops::Path::kFused, d, bs * seq == 0, [&](const ops::Call& call) {
    run(call,
        {static_cast<const char*>(input), bs, seq, weight, bias, static_cast<char*>(output), a2a});
  });
}

void A2aTransposeGemmImpl::forward_comm_only(const void* input, int64_t bs, int64_t seq,
                                             void* a2a_output) {
  ops::CallDescriptor d;
  d.fields = {bs, seq, 0, 0};
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"input", input}});
  core_->run(ops::Path::kCommOnly, d, bs * seq == 0, [&](const ops::Call& call) {
    run(call,
        {static_cast<const char*>(input), bs, seq, nullptr, nullptr, nullptr, a2a_buf_.data()});
    if (a2a_output != nullptr)
      std::memcpy(a2a_output, a2a_buf_.data(),
                  static_cast<std::size_t>(bs * (seq / ctx_->topo().world_size())) * opts_.nheads *
                      opts_.head_dim * dtype_size(opts_.input_dtype));
  });
}

void A2aTransposeGemmImpl::forward_gemm_only(int64_t bs, int64_t seq, const void* weight,
                                             const void* bias, void* output) {
  ops::CallDescriptor d;
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"weight", weight}, {"output", output}});
  core_->run(ops::Path::kGemmOnly, d, bs * seq == 0, [&](const ops::Call& call) {
    run(call, {nullptr, bs, seq, weight, bias, static_cast<char*>(output), a2a_buf_.data()});
  });
}

void A2aTransposeGemmImpl::run(const ops::Call& call, const Args& a) {
  const comm::Parts& c = *ctx_;
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  const ops::UlyssesDims d = ops::ulysses_dims(W, a.bs, a.seq, opts_.nheads, opts_.head_dim);
  const int64_t K = opts_.nheads * opts_.head_dim;
  const std::size_t esz = dtype_size(opts_.input_dtype);
  const std::size_t run_bytes = static_cast<std::size_t>(d.head_dim) * esz;
  const std::size_t blk_row = static_cast<std::size_t>(d.cols) * esz, a2a_row = K * esz;
  const std::size_t blk = static_cast<std::size_t>(d.rows) * blk_row;
  const bool comm = call.comm(), compute = call.compute();
  if (comm) a2a_.begin(*core_, ops::equal_blocks(blk));
  if (compute) weight_.prepare(opts_.input_dtype, a.weight, opts_.n, K, false);
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = a.bias;
  const std::size_t out_row = static_cast<std::size_t>(opts_.n) * dtype_size(opts_.output_dtype);

  // Rows [i0, i1) of what we send rank t: row i = (b, t') holds input[b][h][t·seq/W + t'][:]
  // for every local head h, i.e. the layout of a2a_output's column group, `ld` bytes apart.
  auto pack = [&](int t, int64_t i0, int64_t i1, char* to, std::size_t ld) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.s_loc, tl = i % d.s_loc;
      for (int64_t h = 0; h < d.heads_loc; ++h)
        std::memcpy(to + static_cast<std::size_t>(i) * ld + h * run_bytes,
                    a.input + (static_cast<std::size_t>(b * d.heads_loc + h) * d.seq +
                               static_cast<std::size_t>(t) * d.s_loc + tl) *
                                  run_bytes,
                    run_bytes);
    }
  };
  // Rows [i0, i1) of source s's block into a2a's column group s.
  auto take = [&](int s, const char* from, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      std::memcpy(a.a2a + static_cast<std::size_t>(i) * a2a_row + s * blk_row, from + i * blk_row,
                  blk_row);
  };

  // Row tiles: each GEMM call packs the whole weight again (n x nheads·head_dim), so tiles stay
  // large (at least 256 rows, at most 4), and there is a single one when the weight is at least
  // as wide as a tile is tall (then the packs would cost more than the pipelining wins).
  int64_t tile = std::max<int64_t>(256, (d.rows + 3) / 4);
  if (opts_.n >= tile) tile = std::max<int64_t>(d.rows, 1);
  const int64_t tiles = (d.rows + tile - 1) / tile;

  // Every peer's block is packed first, in the exchange's send order (other hosts' ranks first:
  // the transport sends each part as it is published), tile by tile, each tile published as it
  // is packed.
  if (comm)
    for (int t : a2a_.targets()) {
      const ops::Outbox box = a2a_.to(t);
      for (int64_t j = 0; j < tiles; ++j) {
        const int64_t i1 = std::min(d.rows, (j + 1) * tile);
        pack(t, j * tile, i1, box.data(), blk_row);
        box.publish(static_cast<std::size_t>(i1) * blk_row);
      }
    }
  // Everything tile j of the exchanged rows needs: our own rows, then every source's rows of the
  // tile as they land, in the exchange's receive order. `stop`: see Offload.
  auto exchange_tile = [&](int64_t j, const std::atomic<bool>* stop) {
    const int64_t i0 = j * tile, i1 = std::min(d.rows, i0 + tile);
    pack(r, i0, i1, a.a2a + r * blk_row, a2a_row);
    for (int s : a2a_.sources()) {
      const ops::Inbox in = a2a_.from(s);
      in.wait(static_cast<std::size_t>(i1) * blk_row, stop);
      take(s, in.data(), i0, i1);
    }
  };
  auto gemm_tile = [&](int64_t j) {
    const int64_t i0 = j * tile, i1 = std::min(d.rows, i0 + tile);
    o.c = a.output + static_cast<std::size_t>(i0) * out_row;
    ops::tiled_gemm(*core_, weight_, a.a2a + static_cast<std::size_t>(i0) * a2a_row, K, i1 - i0, 0,
                    opts_.n, o);
  };

  if (compute && a2a_.networked() && opts_.output_dtype != DType::kBFloat16) {
    // Across hosts the GEMM is split along K by source, out = Σ_s a2a[:, cols of s] ·
    // weight[:, cols of s]ᵀ: our own source first, then the sources in the exchange's receive
    // order (this host's land at memory speed while the other hosts' are still on the link),
    // each in fixed row tiles as its rows land. gemm-only runs the same sequence over the rows in
    // place, so a forward and gemm-only make the same GEMM calls and their bits match.
    if (comm) pack(r, 0, d.rows, a.a2a + r * blk_row, a2a_row);
    kernels::GemmWeight slice;
    const int64_t rtile = ops::fixed_tile_rows(opts_.n, d.cols);
    bool first = true;
    auto source = [&](int s) {
      slice.prepare(opts_.input_dtype, static_cast<const char*>(a.weight) + s * blk_row, opts_.n,
                    d.cols, false, K);
      const bool arrives = comm && s != r;  // a peer's rows come in; ours are in place
      const ops::Inbox in = arrives ? a2a_.from(s) : ops::Inbox();
      for (int64_t i0 = 0; i0 < d.rows; i0 += rtile) {
        const int64_t i1 = std::min(d.rows, i0 + rtile);
        if (arrives) {
          in.wait(static_cast<std::size_t>(i1) * blk_row);
          take(s, in.data(), i0, i1);
        }
        o.c = a.output + static_cast<std::size_t>(i0) * out_row;
        o.bias = first ? a.bias : nullptr;
        o.accumulate = !first;
        ops::tiled_gemm(*core_, slice, a.a2a + static_cast<std::size_t>(i0) * a2a_row + s * blk_row,
                        K, i1 - i0, 0, opts_.n, o, {}, ops::Tiling::kFixed);
      }
      first = false;
    };
    source(r);
    for (int s : a2a_.sources()) source(s);
    return;
  }
  if (comm && compute && c.runtime().config().copy_offload && tiles > 1 && W > 1) {
    // Copy offload: a comm stream exchanges tile after tile, raising `ready`, while this thread
    // runs the GEMM of every tile that is ready.
    shm::Signal ready;
    constexpr uint64_t kFailed = ~uint64_t{0};
    ops::Offload copies(c);
    copies.start([&] {
      try {
        for (int64_t j = 0; j < tiles; ++j) {
          exchange_tile(j, copies.stop());
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
        raise(Errc::kInternal, "{}: the copy stream failed at tile {} (rank {})", kOp, j, r);
      }
      gemm_tile(j);
    }
    copies.finish();
    return;
  }
  for (int64_t j = 0; j < tiles; ++j) {
    if (comm) exchange_tile(j, nullptr);
    if (compute) gemm_tile(j);
  }
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
