#include "ops/gemm_a2a_transpose.hpp"

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
  call(ops::Path::kFused, d,
       {static_cast<const char*>(input), bs, seq, weight, bias, static_cast<char*>(output)});
}

void GemmA2aTransposeImpl::forward_gemm_only(const void* input, int64_t bs, int64_t seq,
                                             const void* weight, const void* bias) {
  ops::CallDescriptor d;
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"input", input}, {"weight", weight}});
  call(ops::Path::kGemmOnly, d, {static_cast<const char*>(input), bs, seq, weight, bias, nullptr});
}

void GemmA2aTransposeImpl::forward_comm_only(int64_t bs, int64_t seq, void* output) {
  ops::CallDescriptor d;
  d.fields = {bs, seq, 0, 0};
  d.error = ops::ulysses_check_forward(*ctx_, kOp, bs, seq, opts_.max_bs, opts_.max_seq,
                                       {{"output", output}});
  call(ops::Path::kCommOnly, d, {nullptr, bs, seq, nullptr, nullptr, static_cast<char*>(output)});
}

GemmA2aTransposeImpl::Schedule GemmA2aTransposeImpl::plan(ops::Path path) const {
  Schedule s;
  s.path = path;
  // With copy offload a comm stream places the sources' rows as they land while this thread
  // computes block after block; otherwise this thread places what has landed after each block,
  // and the rest at the end.
  s.offload =
      path == ops::Path::kFused && ctx_->runtime().config().copy_offload && a2a_.shm_peers();
  return s;
}

void GemmA2aTransposeImpl::call(ops::Path path, ops::CallDescriptor& d, const Args& a) {
  if (d.error.empty()) schedule_ = plan(path);
  core_->run(path, d, a.bs * a.seq == 0, [&](const ops::Call&) { run(schedule_, a); });
}

void GemmA2aTransposeImpl::run(const Schedule& s, const Args& a) {
  const int W = ctx_->topo().world_size();
  dims_ = ops::ulysses_dims(W, a.bs, a.seq, opts_.nheads, opts_.head_dim);
  row_ = static_cast<std::size_t>(dims_.cols) * dtype_size(opts_.output_dtype);
  placed_.assign(static_cast<std::size_t>(W), 0);
  if (s.path == ops::Path::kGemmOnly) return run_gemm_only(a);
  if (s.path == ops::Path::kCommOnly) return run_comm_only(a);
  run_fused(s, a);
}

void GemmA2aTransposeImpl::run_fused(const Schedule& s, const Args& a) {
  // The blocks in the exchange's send order (other hosts' first: the transport ships each tile as
  // it is computed); our own last, since peers need theirs first.
  const int r = ctx_->topo().world_rank();
  a2a_.begin(*core_, ops::equal_blocks(block()));
  weight_.prepare(opts_.input_dtype, a.weight, opts_.nheads * opts_.head_dim, opts_.hidden, false);
  ops::Offload copies(*ctx_);
  if (s.offload)
    copies.start([&] {
      for (int src : a2a_.sources()) take(a, src, /*wait=*/true, copies.stop());
    });
  for (int t : a2a_.targets()) {
    gemm_block(a, t, a2a_.to(t));
    if (!s.offload)
      for (int src : a2a_.sources()) take(a, src, /*wait=*/false, nullptr);
  }
  gemm_block(a, r, a2a_.to(r));
  place(a, r, a2a_.out_slot() + block() * r, 0, dims_.rows);
  if (!s.offload)
    for (int src : a2a_.sources()) take(a, src, /*wait=*/true, nullptr);
  copies.finish();
}

void GemmA2aTransposeImpl::run_gemm_only(const Args& a) {
  // The blocks' GEMMs into a2a-out, in the fused order, published to no one.
  weight_.prepare(opts_.input_dtype, a.weight, opts_.nheads * opts_.head_dim, opts_.hidden, false);
  for (int t : a2a_.targets()) gemm_block(a, t, ops::Outbox());
  gemm_block(a, ctx_->topo().world_rank(), ops::Outbox());
}

void GemmA2aTransposeImpl::run_comm_only(const Args& a) {
  // The fused exchange of the blocks a2a-out holds (the last gemm-only's).
  const int r = ctx_->topo().world_rank();
  a2a_.begin(*core_, ops::equal_blocks(block()));
  for (int t : a2a_.targets()) {
    a2a_.to(t).publish_all();
    for (int src : a2a_.sources()) take(a, src, /*wait=*/false, nullptr);
  }
  a2a_.to(r).publish_all();
  place(a, r, a2a_.out_slot() + block() * r, 0, dims_.rows);
  for (int src : a2a_.sources()) take(a, src, /*wait=*/true, nullptr);
}

void GemmA2aTransposeImpl::gemm_block(const Args& a, int t, const ops::Outbox& box) {
  kernels::GemmOut o;
  o.c = a2a_.out_slot() + block() * t;
  o.ldc = dims_.cols;
  o.dtype = opts_.output_dtype;
  o.bias = a.bias;
  // Each finished tile is published: another host's block leaves while the rest is computed.
  ops::tiled_gemm(*core_, weight_, a.input, opts_.hidden, dims_.rows, t * dims_.cols,
                  (t + 1) * dims_.cols, o,
                  [&](int64_t done) { box.publish(static_cast<std::size_t>(done) * row_); });
  box.publish_all();
}

void GemmA2aTransposeImpl::place(const Args& a, int s, const char* from, int64_t i0,
                                 int64_t i1) const {
  // Source s's block [bs, seq/W, heads_loc·head_dim] into output [bs, heads_loc, seq, head_dim].
  const ops::UlyssesDims& d = dims_;
  const std::size_t run_bytes =
      static_cast<std::size_t>(d.head_dim) * dtype_size(opts_.output_dtype);
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t b = i / d.s_loc, t = i % d.s_loc;
    for (int64_t h = 0; h < d.heads_loc; ++h)
      std::memcpy(a.output + ((static_cast<std::size_t>(b * d.heads_loc + h) * d.seq) +
                              static_cast<std::size_t>(s) * d.s_loc + t) *
                                 run_bytes,
                  from + static_cast<std::size_t>(i) * row_ + h * run_bytes, run_bytes);
  }
}

void GemmA2aTransposeImpl::take(const Args& a, int s, bool wait, const std::atomic<bool>* stop) {
  // One body for every source: a host peer's block lands at memory speed, another host's chunk by
  // chunk as the transport delivers it.
  const ops::Inbox in = a2a_.from(s);
  auto put = [&](int64_t i0, int64_t i1) {
    place(a, s, in.data(), i0, i1);
    placed_[s] = i1;
  };
  if (wait)
    in.for_rows(row_, placed_[s], dims_.rows, put, stop);
  else
    put(placed_[s], std::max(placed_[s], in.rows_landed(row_, dims_.rows)));
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
