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

ops::A2aExchange::Plan A2aGemmImpl::blocks(std::size_t blk) {
  return {[blk](int, int) { return blk; }, [blk](int, int t) { return blk * t; },
          [blk](int s) { return blk * s; }};
}

A2aGemmImpl::Schedule A2aGemmImpl::plan(ops::Path path, const ops::GemmCall& a) const {
  const int W = ctx_->topo().world_size();
  Schedule s;
  s.path = path;
  // Each GEMM call re-reads (and re-blocks) the whole weight (n x k), so computing block by block
  // costs W packs; when the weight is at least as wide as a block is tall, that costs more than the
  // overlap wins: the blocks are then gathered into one buffer and multiplied in one call.
  s.kind = W > 1 && opts_.n >= rows(a) ? Schedule::Kind::kGather : Schedule::Kind::kInPlace;
  s.offload =
      path == ops::Path::kFused && ctx_->runtime().config().copy_offload && W > 1 && !a.zero_copy;
  return s;
}

void A2aGemmImpl::run(const ops::Call&, const ops::GemmCall& a) {
  const Schedule s = schedule_;
  if (s.path == ops::Path::kCommOnly) return run_comm_only(s, a);
  if (s.path == ops::Path::kGemmOnly) return run_gemm_only(s, a);
  switch (s.kind) {
    case Schedule::Kind::kInPlace: return run_in_place(s, a);
    case Schedule::Kind::kGather: return run_gathered(s, a);
  }
}

void A2aGemmImpl::run_in_place(const Schedule& s, const ops::GemmCall& a) {
  // Each block through the GEMM as its rows land (ours first: it needs nothing from anyone), and
  // its copy into a2a_output.
  weight_.prepare(opts_.input_dtype, a.weight, opts_.n, opts_.k, opts_.transpose_weight);
  ops::Offload copies(*ctx_);
  stage(s, a, copies);
  each_block(a, /*held=*/false, [&](int src, const char* from, int64_t i0, int64_t i1) {
    gemm(a, src, from, i0, i1);
    if (a.moved != nullptr)
      std::memcpy(a.moved + block(a) * src + i0 * in_row_, from + i0 * in_row_,
                  static_cast<std::size_t>(i1 - i0) * in_row_);
  });
  copies.finish();
}

void A2aGemmImpl::run_gathered(const Schedule& s, const ops::GemmCall& a) {
  // Every block into our buffer as it lands (where gemm-only finds them), then one GEMM.
  weight_.prepare(opts_.input_dtype, a.weight, opts_.n, opts_.k, opts_.transpose_weight);
  ops::Offload copies(*ctx_);
  stage(s, a, copies);
  char* local = local_.data();
  each_block(a, /*held=*/false, [&](int src, const char* from, int64_t i0, int64_t i1) {
    std::memcpy(local + block(a) * src + i0 * in_row_, from + i0 * in_row_,
                static_cast<std::size_t>(i1 - i0) * in_row_);
  });
  gemm(a, 0, local, 0, a.m);
  if (a.moved != nullptr) std::memcpy(a.moved, local, block(a) * ctx_->topo().world_size());
  copies.finish();
}

void A2aGemmImpl::run_comm_only(const Schedule& s, const ops::GemmCall& a) {
  // The schedule's movement: kGather's into our buffer (where gemm-only finds the blocks), then
  // to the caller; kInPlace's straight to the caller (gemm-only reads the blocks in place).
  ops::Offload copies(*ctx_);
  stage(s, a, copies);
  const bool gather = s.kind == Schedule::Kind::kGather;
  char* into = gather ? local_.data() : a.moved;
  each_block(a, /*held=*/false, [&](int src, const char* from, int64_t i0, int64_t i1) {
    if (into != nullptr)
      std::memcpy(into + block(a) * src + i0 * in_row_, from + i0 * in_row_,
                  static_cast<std::size_t>(i1 - i0) * in_row_);
  });
  if (gather && a.moved != nullptr)
    std::memcpy(a.moved, local_.data(), block(a) * ctx_->topo().world_size());
}

void A2aGemmImpl::run_gemm_only(const Schedule& s, const ops::GemmCall& a) {
  // The schedule's GEMMs on whatever the buffers hold (no waits): kGather's over our buffer, our
  // own block refreshed from `input`; kInPlace's over the blocks in place.
  weight_.prepare(opts_.input_dtype, a.weight, opts_.n, opts_.k, opts_.transpose_weight);
  if (s.kind == Schedule::Kind::kGather) {
    const int r = ctx_->topo().world_rank();
    std::memcpy(local_.data() + block(a) * r, a.input + block(a) * r, block(a));
    return gemm(a, 0, local_.data(), 0, a.m);
  }
  each_block(a, /*held=*/true, [&](int src, const char* from, int64_t i0, int64_t i1) {
    gemm(a, src, from, i0, i1);
  });
}

void A2aGemmImpl::stage(const Schedule& s, const ops::GemmCall& a, ops::Offload& copies) {
  // Blocks for other hosts first (the slowest path; the transport sends each as it is
  // published), then the blocks for host peers in ring order. With copy offload the staging runs
  // on a comm stream while this thread computes our own block.
  const std::size_t blk = block(a);
  auto stage_all = [this, blk, input = a.input, zero_copy = a.zero_copy] {
    for (int t : a2a_.targets()) {
      const ops::Outbox box = a2a_.to(t);
      if (!zero_copy) std::memcpy(box.data(), input + blk * t, blk);
      box.publish_all();
    }
  };
  a2a_.begin(*core_, blocks(blk));
  if (s.offload)
    copies.start(stage_all);
  else
    stage_all();
}

template <class F>
void A2aGemmImpl::each_block(const ops::GemmCall& a, bool held, F&& f) {
  // Our own block needs nothing from anyone. Then the peers' blocks, read in place row chunk by
  // row chunk as they land: host peers first in the matching ring order (peer r-i staged ours at
  // its step i; a block lands whole), then other hosts' as the network delivers them.
  const int r = ctx_->topo().world_rank();
  const int64_t n = rows(a);
  f(r, a.input + block(a) * r, 0, n);
  const ops::A2aExchange::Plan p = blocks(block(a));
  for (int src : a2a_.sources()) {
    const ops::Inbox in = held ? a2a_.held(src, p) : a2a_.from(src);
    in.for_rows(in_row_, n, [&](int64_t i0, int64_t i1) { f(src, in.data(), i0, i1); });
  }
}

void A2aGemmImpl::gemm(const ops::GemmCall& a, int s, const char* rows, int64_t i0, int64_t i1) {
  kernels::GemmOut o;
  o.c = a.output + (static_cast<std::size_t>(s) * this->rows(a) + i0) * out_row_;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = a.bias;
  ops::tiled_gemm(*core_, weight_, rows + i0 * in_row_, opts_.k, i1 - i0, 0, opts_.n, o);
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
