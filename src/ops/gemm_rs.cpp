#include "ops/gemm_rs.hpp"

#include <cstring>
#include <utility>

#include "error_util.hpp"
#include "kernels/reduce.hpp"
#include "ops/core/create.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/tiled_gemm.hpp"

namespace fluxcpp {
namespace detail {

void GemmRsImpl::create(const comm::Parts& c, const std::string& local_error) {
  const GemmRsOptions o = opts_;
  ops::check_gemm_create(c, kOp, ops::gemm_shape(o), local_error);
  acc_ = o.input_dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const int W = c.topo().world_size();
  const std::size_t block = static_cast<std::size_t>(o.max_m / W) * o.n * dtype_size(acc_);
  // The partials are computed into the segment even when alone.
  reduce_ = ops::ReduceExchange(c, links_, layout_, block, block, /*needed=*/true, kOp);
  // Releasing, writing locally: gemm-only writes the partials outside a call.
  make_core(ops::OpCore::Spec::of(kOp, {"m", ops::kBiasField})
                .runs_gemm()
                .releasing()
                .writing_locally()
                .with_payload(ops::latency_payload_bytes(
                    links_, static_cast<std::size_t>(o.max_m) * o.n * dtype_size(acc_),
                    /*across_hosts=*/true)));
  reduce_.allow_presum(block, kOp);
}

char* GemmRsImpl::partial(int t, int64_t m) const {
  const std::size_t blk =
      static_cast<std::size_t>(m / ctx_->topo().world_size()) * opts_.n * dtype_size(acc_);
  return reduce_.shares() + blk * t;
}

void GemmRsImpl::compute(const Schedule& s, const ops::GemmCall& a, bool publish,
                         const std::function<void(int64_t r0, int64_t r1)>& own_rows) {
  const int W = ctx_->topo().world_size(), r = ctx_->topo().world_rank();
  const int64_t m = a.m, rows = m / W;
  const std::size_t in_row = static_cast<std::size_t>(opts_.k) * dtype_size(opts_.input_dtype);
  ops::prepare_weight(weight_, a.packed, ops::gemm_shape(opts_), a.weight);
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = acc_;
  if (s.one_call) {
    o.c = partial(0, m);
    kernels::gemm_tile(weight_, a.input, opts_.k, m, 0, opts_.n, o);
    if (publish)
      for (int t = 0; t < W; ++t)
        if (t != r) reduce_.share(t).publish_all();
    if (own_rows) own_rows(0, rows);
    return;
  }
  // Block by block: blocks for peers first, in ring order so that peers do not all wait for the
  // same rank; each is published as soon as it is done; our own block last.
  for (int t : core_->links().up_self()) {
    o.c = partial(t, m);
    const ops::Outbox share = reduce_.share(t);
    const std::size_t out_row = static_cast<std::size_t>(opts_.n) * dtype_size(acc_);
    // Each finished tile is published: another host's partial leaves while the rest is computed.
    // Rows of our own block go to `own_rows` as they are done.
    // The split into GEMM calls depends on the shape and the layout only (one call per block on
    // one host, fixed tiles across hosts), and each runs on this thread: the partials, and so
    // the sums, have the same bits whatever the timing or the thread count.
    int64_t prev = 0;
    auto on_tile = [&](int64_t done) {
      if (publish && t != r) share.publish(static_cast<std::size_t>(done) * out_row);
      if (t == r && own_rows) own_rows(prev, done);
      prev = done;
    };
    ops::tiled_gemm(*core_, weight_, a.input + in_row * rows * t, opts_.k, rows, 0, opts_.n, o,
                    on_tile, ops::Tiling::kSerialAcrossHosts);
  }
}

void GemmRsImpl::add_bias(int64_t m, const void* bias, int64_t r0, int64_t r1, char* partials) {
  // The bias joins rank r's own partial of block r only, so it is added exactly once, in the
  // accumulation dtype, before the fixed-order sum.
  if (bias == nullptr) return;
  const int r = ctx_->topo().world_rank();
  const int64_t rows = m / ctx_->topo().world_size();
  const std::size_t row = static_cast<std::size_t>(opts_.n) * dtype_size(acc_);
  char* own = (partials != nullptr ? partials + row * rows * r : partial(r, m)) + row * r0;
  kernels::add_bias(acc_, own, (r1 < 0 ? rows : r1) - r0, opts_.n, bias, opts_.output_dtype);
}

void GemmRsImpl::sum_payloads(int64_t m, void* output) {
  const int64_t count = m / ctx_->topo().world_size() * opts_.n;
  reduce_.sum_payloads(*core_, acc_, opts_.output_dtype,
                       static_cast<std::size_t>(count) * dtype_size(acc_), count, output);
}

void GemmRsImpl::reduce(int64_t m, void* output) {
  const int64_t count = m / ctx_->topo().world_size() * opts_.n;
  reduce_.reduce(
      acc_, acc_, opts_.output_dtype, count, [&](int t) { return partial(t, m); }, output);
}

void GemmRsImpl::begin(int64_t m) {
  const std::size_t blk =
      static_cast<std::size_t>(m / ctx_->topo().world_size()) * opts_.n * dtype_size(acc_);
  reduce_.begin(*core_, blk, blk, /*direct=*/true);
}

GemmRsImpl::Schedule GemmRsImpl::plan(ops::Path path, int64_t m) const {
  using Kind = Schedule::Kind;
  const int W = ctx_->topo().world_size();
  Schedule s;
  s.path = path;
  // One call over all m rows: each call re-reads (and re-blocks) the whole weight, which costs
  // more than the overlap per block would win when the weight is wider than a block is tall —
  // unless a block has to cross hosts, whose transfer then hides behind the next block's GEMM.
  // At decode sizes (m <= kMinTileRows) always one call: the weight is read once.
  s.one_call = W == 1 || (opts_.n >= m / W && !reduce_.networked()) || m <= ops::kMinTileRows;
  if (path != ops::Path::kFused) return s;  // the steps of kReduce
  // The latency path (decode sizes on one host, or across hosts of one rank each): the partials,
  // computed as the one-call path computes them, ride on the handshake; every rank then sums its
  // block in the same order from the payloads — the same bits, one exchange.
  const std::size_t partial_bytes = static_cast<std::size_t>(m) * opts_.n * dtype_size(acc_);
  if (m > 0 && m <= ops::kMinTileRows && partial_bytes <= core_->handshake().payload_bytes())
    s.kind = Kind::kLatency;
  else if (reduce_.sends_direct())
    s.kind = Kind::kDirect;
  else if (reduce_.presums())
    s.kind = Kind::kPresum;
  return s;
}

std::string GemmRsImpl::check(ops::Path path, const ops::GemmCall& a) const {
  if (path == ops::Path::kGemmOnly)
    return ops::check_forward(*ctx_, kOp, a.m, opts_.max_m,
                              {{"input", a.input}, {"weight", a.weight}});
  if (path == ops::Path::kCommOnly)
    return ops::check_forward(*ctx_, kOp, a.m, opts_.max_m, {{"output", a.output}});
  return ops::check_gemm_call(*ctx_, kOp, path, a, opts_.max_m, ops::gemm_shape(opts_));
}

void GemmRsImpl::call(ops::Path path, const ops::GemmCall& a) {
  ops::CallDescriptor d;
  d.fields = {a.m, a.bias != nullptr, 0, 0};  // whether a bias was passed is agreed
  d.error = check(path, a);
  if (d.error.empty()) schedule_ = plan(path, a.m);
  if (d.error.empty() && schedule_.kind == Schedule::Kind::kLatency) latency_payload(a, d);
  // gemm-only writes the partials in our segment: the core first waits until host peers are
  // done reducing the last call's.
  core_->run(path, d, a.m == 0, [&](const ops::Call&) { run(schedule_, a); });
}

void GemmRsImpl::latency_payload(const ops::GemmCall& a, ops::CallDescriptor& d) {
  d.payload = [this, &a](char* slot) {
    ops::prepare_weight(weight_, a.packed, ops::gemm_shape(opts_), a.weight);
    kernels::GemmOut o;
    o.c = slot;
    o.ldc = opts_.n;
    o.dtype = acc_;
    kernels::gemm_tile(weight_, a.input, opts_.k, a.m, 0, opts_.n, o);
    add_bias(a.m, a.bias, 0, -1, slot);
  };
  // Across hosts only these bytes travel, each rank's block to it alone.
  d.payload_len = static_cast<std::size_t>(a.m) * opts_.n * dtype_size(acc_);
  const std::size_t block = d.payload_len / static_cast<std::size_t>(ctx_->topo().world_size());
  d.payload_part = [block](int g) {
    return std::pair<std::size_t, std::size_t>(block * static_cast<std::size_t>(g), block);
  };
}

void GemmRsImpl::run(const Schedule& s, const ops::GemmCall& a) {
  if (s.path == ops::Path::kGemmOnly) return compute(s, a, /*publish=*/false);
  if (s.path == ops::Path::kCommOnly) return run_comm_only(a);
  switch (s.kind) {
    case Schedule::Kind::kLatency: return sum_payloads(a.m, a.output);
    case Schedule::Kind::kDirect: return run_direct(s, a);
    case Schedule::Kind::kPresum: return compute_offloaded(s, a);
    case Schedule::Kind::kReduce: return run_reduce(s, a);
  }
}

void GemmRsImpl::run_direct(const Schedule& s, const ops::GemmCall& a) {
  // Alone on the host: each tile of our own block is summed with the other hosts' partials of
  // its rows as soon as it is computed (while it is in cache), in the same order.
  begin(a.m);
  const int64_t n = opts_.n;
  char* own = partial(ctx_->topo().world_rank(), a.m);
  compute(s, a, /*publish=*/true, [&](int64_t r0, int64_t r1) {
    add_bias(a.m, a.bias, r0, r1);
    reduce_.reduce_range(acc_, opts_.output_dtype, r0 * n, r1 * n, own, a.output);
  });
}

void GemmRsImpl::run_reduce(const Schedule& s, const ops::GemmCall& a) {
  begin(a.m);
  compute(s, a, /*publish=*/true);
  add_bias(a.m, a.bias);
  reduce(a.m, a.output);
}

void GemmRsImpl::compute_offloaded(const Schedule& s, const ops::GemmCall& a) {
  // Copy offload on one host: a comm stream sums the peers' partials of our block as they land
  // while this thread computes; our own partial, computed last, is added at the end.
  begin(a.m);
  const int64_t count = a.m / ctx_->topo().world_size() * opts_.n;
  ops::Offload copies(*ctx_);
  reduce_.start_presum(copies, acc_, count);
  compute(s, a, /*publish=*/true);
  add_bias(a.m, a.bias);
  reduce_.finish_presum(copies, acc_, partial(ctx_->topo().world_rank(), a.m), opts_.output_dtype,
                        a.output, count);
}

void GemmRsImpl::run_comm_only(const ops::GemmCall& a) {
  // The partials are whatever the last gemm-only left: publish them for this call.
  begin(a.m);
  add_bias(a.m, a.bias);
  for (int t = 0; t < ctx_->topo().world_size(); ++t)
    if (t != ctx_->topo().world_rank()) reduce_.share(t).publish_all();
  reduce(a.m, a.output);
}

void GemmRsImpl::forward(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output) {
  call(ops::Path::kFused, ops::GemmCall::fused(input, m, weight, bias, output, nullptr));
}

void GemmRsImpl::forward(const void* input, int64_t m, const kernels::PackedWeight& weight,
                         const void* bias, void* output) {
  ops::GemmCall a = ops::GemmCall::fused(input, m, &weight, bias, output, nullptr);
  a.packed = &weight;
  call(ops::Path::kFused, a);
}

void GemmRsImpl::forward_gemm_only(const void* input, int64_t m, const void* weight) {
  call(ops::Path::kGemmOnly, ops::GemmCall::gemm_only(input, m, weight, nullptr, nullptr));
}

void GemmRsImpl::forward_comm_only(int64_t m, const void* bias, void* output) {
  ops::GemmCall a = ops::GemmCall::fused(nullptr, m, nullptr, bias, output, nullptr);
  call(ops::Path::kCommOnly, a);
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(GemmRs, GemmRsOptions);

FLUXCPP_PUBLIC_GEMM_FORWARDS(GemmRs);
void GemmRs::forward_gemm_only(const void* input, int64_t m, const void* weight) {
  ops::checked(impl_).forward_gemm_only(input, m, weight);
}
void GemmRs::forward_comm_only(int64_t m, const void* bias, void* output) {
  ops::checked(impl_).forward_comm_only(m, bias, output);
}

}  // namespace fluxcpp
