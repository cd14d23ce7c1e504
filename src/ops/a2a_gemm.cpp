#include "ops/a2a_gemm.hpp"

#include <cstring>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/tiled_gemm.hpp"

namespace fluxcpp {
namespace detail {

void A2aGemmImpl::create(const comm::Parts& c, const std::string& local_error) {
  const A2aGemmOptions o = opts_;
  ops::check_gemm_create(c, kOp, ops::gemm_shape(o), local_error);
  in_row_ = static_cast<std::size_t>(o.k) * dtype_size(o.input_dtype);
  out_row_ = static_cast<std::size_t>(o.n) * dtype_size(o.output_dtype);
  const std::size_t max_bytes = static_cast<std::size_t>(o.max_m) * in_row_;
  a2a_ = ops::A2aExchange(links_, layout_, max_bytes, max_bytes, /*needed=*/true);
  // Releasing: the caller writes the zero-copy input buffer outside a call.
  make_core(ops::OpCore::Spec::of(kOp, {"m"}).runs_gemm().releasing());
  // The gather buffer is allocated here, agreed, so a failed allocation cannot strand the peers
  // of a forward.
  comm::agree(c.control(), [&] {
    resize_or_raise(local_, static_cast<std::size_t>(o.max_m) * in_row_, kOp, "the gather buffer");
  });
}

ops::A2aExchange::Plan A2aGemmImpl::plan(std::size_t blk) {
  return {[blk](int, int) { return blk; }, [blk](int, int t) { return blk * t; },
          [blk](int s) { return blk * s; }};
}

void A2aGemmImpl::run(const ops::Call& call, const ops::GemmCall& a) {
  const comm::Parts& c = *ctx_;
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  const int64_t rows = a.m / W;
  const std::size_t blk = static_cast<std::size_t>(rows) * in_row_;
  const bool comm = call.comm(), compute = call.compute();
  if (compute)
    weight_.prepare(opts_.input_dtype, a.weight, opts_.n, opts_.k, opts_.transpose_weight);
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = a.bias;
  // Each GEMM call re-reads (and re-blocks) the whole weight (n x k), so computing block by block
  // costs W packs; when the weight is at least as wide as a block is tall, that costs more than the
  // overlap wins: the blocks are then gathered into one buffer and multiplied in one call.
  const bool gather = W > 1 && opts_.n >= rows;
  // Gather mode collects into our buffer, which gemm-only then reads (its own block refreshed
  // from `input`, the others as the last exchange left them).
  char* local = local_.data();
  // Rows [i0, i1) of block s of the result: the GEMM over the rows s sent us, and their copy
  // into a2a_output.
  auto consume = [&](int s, const char* from, int64_t i0, int64_t i1) {
    const std::size_t off = static_cast<std::size_t>(i0) * in_row_;
    const std::size_t len = static_cast<std::size_t>(i1 - i0) * in_row_;
    if (gather) {
      if (comm || s == r) std::memcpy(local + blk * s + off, from + off, len);
      return;
    }
    if (compute) {
      o.c = a.output + (static_cast<std::size_t>(s) * rows + i0) * out_row_;
      ops::tiled_gemm(*core_, weight_, from + off, opts_.k, i1 - i0, 0, opts_.n, o);
    }
    if (a.moved != nullptr) std::memcpy(a.moved + blk * s + off, from + off, len);
  };
  const ops::A2aExchange::Plan p = plan(blk);

  // 1. Publish: blocks for other hosts first (the slowest path; the transport sends each as it
  // is published), then the blocks for host peers in ring order. With copy offload the staging
  // runs on a comm stream while this thread computes our own block.
  auto stage_all = [&] {
    for (int t : a2a_.targets()) {
      const ops::Outbox box = a2a_.to(t);
      if (!a.zero_copy) std::memcpy(box.data(), a.input + blk * t, blk);
      box.publish_all();
    }
  };
  ops::Offload copies(c);
  if (comm) {
    a2a_.begin(*core_, p);
    if (compute && c.runtime().config().copy_offload && W > 1 && !a.zero_copy)
      copies.start(stage_all);
    else
      stage_all();
  }

  // 2. Our own block needs nothing from anyone.
  consume(r, a.input + blk * r, 0, rows);
  // 3. The peers' blocks, read in place row chunk by row chunk as they land: host peers first in
  // the matching ring order (peer r-i staged ours at its step i; a block lands whole), then other
  // hosts' as the network delivers them. gemm-only reads what the buffers hold.
  for (int s : a2a_.sources()) {
    const ops::Inbox in = comm ? a2a_.from(s) : a2a_.held(s, p);
    in.for_rows(in_row_, rows, [&](int64_t i0, int64_t i1) { consume(s, in.data(), i0, i1); });
  }
  if (gather) {
    if (compute) {
      o.c = a.output;
      ops::tiled_gemm(*core_, weight_, local, opts_.k, a.m, 0, opts_.n, o);
    }
    if (a.moved != nullptr && comm) std::memcpy(a.moved, local, blk * W);
  }
  copies.finish();
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(A2aGemm, A2aGemmOptions);
FLUXCPP_PUBLIC_INPUT_BUFFER(A2aGemm)

void A2aGemm::forward(const void* input, int64_t m, const void* weight, const void* bias,
                      void* output, void* a2a_output) {
  ops::checked(impl_).forward(input, m, weight, bias, output, a2a_output);
}
void A2aGemm::forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                                void* output) {
  ops::checked(impl_).forward_gemm_only(input, m, weight, bias, output);
}
void A2aGemm::forward_comm_only(const void* input, int64_t m, void* a2a_output) {
  ops::checked(impl_).forward_comm_only(input, m, a2a_output);
}

}  // namespace fluxcpp
