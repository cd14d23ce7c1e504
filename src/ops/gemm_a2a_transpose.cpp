#include "ops/gemm_a2a_transpose.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/tiled_gemm.hpp"
#include "ops/ulysses_shapes.hpp"

namespace fluxcpp {
namespace detail {

void GemmA2aTransposeImpl::create(const comm::Parts& c, const std::string& local_error) {
  const GemmA2aTransposeOptions o = opts_;
  ops::ulysses_check_create(c, kOp, o.max_bs, o.max_seq, o.nheads, o.head_dim, o.input_dtype,
                            o.output_dtype, {"hidden", o.hidden}, /*own_is_k=*/true, local_error);
  const int W = c.topo().world_size();
  const ops::UlyssesDims d = ops::ulysses_dims(W, o.max_bs, o.max_seq, o.nheads, o.head_dim);
  const std::size_t blk = static_cast<std::size_t>(d.rows * d.cols) * dtype_size(o.output_dtype);
  // The GEMM writes into a2a-out even when alone.
  a2a_ = ops::A2aExchange(links_, layout_, blk * W, blk * W, /*needed=*/true);
  // Releasing, writing locally: gemm-only writes the blocks outside a call.
  make_core(ops::OpCore::Spec::of(kOp, {"bs", "seq"}).runs_gemm().releasing().writing_locally());
}

void GemmA2aTransposeImpl::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                                   const void* bias, void* output) {
  ops::CallDescriptor d;
  d.fields = {bs, seq, 0, 0};
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"input", input}, {"weight", weight}, {"output", output}});
  core_->run(ops::Path::kFused, d, bs * seq == 0, [&](const ops::Call& call) {
    run(call, static_cast<const char*>(input), bs, seq, weight, bias, static_cast<char*>(output));
  });
}

void GemmA2aTransposeImpl::forward_gemm_only(const void* input, int64_t bs, int64_t seq,
                                             const void* weight, const void* bias) {
  ops::CallDescriptor d;
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"input", input}, {"weight", weight}});
  core_->run(ops::Path::kGemmOnly, d, bs * seq == 0, [&](const ops::Call& call) {
    run(call, static_cast<const char*>(input), bs, seq, weight, bias, nullptr);
  });
}

void GemmA2aTransposeImpl::forward_comm_only(int64_t bs, int64_t seq, void* output) {
  ops::CallDescriptor d;
  d.fields = {bs, seq, 0, 0};
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"output", output}});
  core_->run(ops::Path::kCommOnly, d, bs * seq == 0, [&](const ops::Call& call) {
    run(call, nullptr, bs, seq, nullptr, nullptr, static_cast<char*>(output));
  });
}

void GemmA2aTransposeImpl::run(const ops::Call& call, const char* input, int64_t bs, int64_t seq,
                               const void* weight, const void* bias, char* output) {
  const comm::Parts& c = *ctx_;
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  const ops::UlyssesDims d = ops::ulysses_dims(W, bs, seq, opts_.nheads, opts_.head_dim);
  const std::size_t esz = dtype_size(opts_.output_dtype);
  const std::size_t blk = static_cast<std::size_t>(d.rows * d.cols) * esz;
  const std::size_t row = static_cast<std::size_t>(d.cols) * esz;
  const bool comm = call.comm(), compute = call.compute();
  if (comm) a2a_.begin(*core_, ops::equal_blocks(blk));
  if (compute)
    weight_.prepare(opts_.input_dtype, weight, opts_.nheads * opts_.head_dim, opts_.hidden, false);
  kernels::GemmOut o;
  o.ldc = d.cols;
  o.dtype = opts_.output_dtype;
  o.bias = bias;
  // Columns [t·cols, (t+1)·cols) of y = input · weightᵀ + bias: the head group of rank t.
  auto produce = [&](int t) {
    const ops::Outbox box = comm ? a2a_.to(t) : ops::Outbox();
    if (compute) {
      o.c = a2a_.out_slot() + blk * t;
      // Each finished tile is published: another host's block leaves while the rest is computed.
      ops::tiled_gemm(*core_, weight_, input, opts_.hidden, d.rows, t * d.cols, (t + 1) * d.cols, o,
                      [&](int64_t done) { box.publish(static_cast<std::size_t>(done) * row); });
    }
    box.publish_all();
  };
  // Rows [i0, i1) (row i = (b, t')) of source s's block [bs, seq/W, heads_loc·head_dim] into
  // output [bs, heads_loc, seq, head_dim] at sequence position s·seq/W + t'.
  const std::size_t run_bytes = static_cast<std::size_t>(d.head_dim) * esz;
  auto place = [&](int s, const char* from, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.s_loc, t = i % d.s_loc;
      for (int64_t h = 0; h < d.heads_loc; ++h)
        std::memcpy(output + ((static_cast<std::size_t>(b * d.heads_loc + h) * d.seq) +
                              static_cast<std::size_t>(s) * d.s_loc + t) *
                                 run_bytes,
                    from + static_cast<std::size_t>(i) * row + h * run_bytes, run_bytes);
    }
  };
  // Source s's rows into place as they land, from the placed[s] already there: those that have
  // landed so far, or (wait) all of them. One body for every source: a host peer's block lands at
  // memory speed, another host's chunk by chunk as the transport delivers it.
  std::vector<int64_t> placed(W, 0);
  auto take = [&](int s, bool wait, const std::atomic<bool>* stop) {
    const ops::Inbox in = a2a_.from(s);
    auto put = [&](int64_t i0, int64_t i1) {
      place(s, in.data(), i0, i1);
      placed[s] = i1;
    };
    if (wait)
      in.for_rows(row, placed[s], d.rows, put, stop);
    else
      put(placed[s], std::max(placed[s], in.rows_landed(row, d.rows)));
  };

  // With copy offload a comm stream places the sources' rows as they land while this thread
  // computes block after block; otherwise this thread places what has landed after each block,
  // and the rest at the end.
  const bool offload = comm && compute && c.runtime().config().copy_offload && a2a_.shm_peers();
  ops::Offload copies(c);
  if (offload)
    copies.start([&] {
      for (int s : a2a_.sources()) take(s, /*wait=*/true, copies.stop());
    });
  // The blocks in the exchange's send order (other hosts' first: the transport ships each tile as
  // it is computed); our own last, since peers need theirs first.
  for (int t : a2a_.targets()) {
    produce(t);
    if (comm && !offload)
      for (int s : a2a_.sources()) take(s, /*wait=*/false, nullptr);
  }
  produce(r);
  if (!comm) return;
  place(r, a2a_.out_slot() + blk * r, 0, d.rows);
  if (!offload)
    for (int s : a2a_.sources()) take(s, /*wait=*/true, nullptr);
  copies.finish();
}

}  // namespace detail

// The public class GemmA2aTranspose (include/fluxcpp/gemm_a2a_transpose.hpp): each member forwards
// to the implementation above, through ops::checked (a moved-from op is kInvalidUsage).
FLUXCPP_PUBLIC_MADE_OP(GemmA2aTranspose, GemmA2aTransposeOptions);
void GemmA2aTranspose::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                               const void* bias, void* output) {
  ops::checked(impl_).forward(input, bs, seq, weight, bias, output);
}
void GemmA2aTranspose::forward_gemm_only(const void* input, int64_t bs, int64_t seq,
                                         const void* weight, const void* bias) {
  ops::checked(impl_).forward_gemm_only(input, bs, seq, weight, bias);
}
void GemmA2aTranspose::forward_comm_only(int64_t bs, int64_t seq, void* output) {
  ops::checked(impl_).forward_comm_only(bs, seq, output);
}

}  // namespace fluxcpp
