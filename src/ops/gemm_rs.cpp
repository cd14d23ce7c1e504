#include "ops/gemm_rs.hpp"

#include <cstring>

#include "error_util.hpp"
#include "kernels/reduce.hpp"
#include "ops/core/create.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/tiled_gemm.hpp"

namespace fluxcpp {
namespace detail {

void GemmRsImpl::create(ContextImpl& c, const std::string& local_error) {
  const GemmRsOptions o = opts_;
  ops::check_gemm_create(c, kOp, ops::gemm_shape(o), local_error);
  acc_ = o.input_dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const int W = c.world_size();
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
      static_cast<std::size_t>(m / ctx_->world_size()) * opts_.n * dtype_size(acc_);
  return reduce_.shares() + blk * t;
}

void GemmRsImpl::compute(const char* input, int64_t m, const void* weight, bool publish,
                         const std::function<void(int64_t r0, int64_t r1)>& own_rows) {
  ContextImpl& c = *ctx_;
  const int W = c.world_size(), r = c.world_rank();
  const int64_t rows = m / W;
  const std::size_t in_row = static_cast<std::size_t>(opts_.k) * dtype_size(opts_.input_dtype);
  ops::prepare_weight(weight_, packed_, ops::gemm_shape(opts_), weight);
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = acc_;
  if (W == 1 || (opts_.n >= rows && !reduce_.networked()) || m <= ops::kMinTileRows) {
    // One call over all m rows: each call re-reads (and re-blocks) the whole weight, which costs
    // more than the overlap per block would win when the weight is wider than a block is tall —
    // unless a block has to cross hosts, whose transfer then hides behind the next block's GEMM.
    // At decode sizes (m <= kMinTileRows) always one call: the weight is read once.
    o.c = partial(0, m);
    kernels::gemm_tile(weight_, input, opts_.k, m, 0, opts_.n, o);
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
    const char* a = input + in_row * rows * t;
    ops::tiled_gemm(*core_, weight_, a, opts_.k, rows, 0, opts_.n, o, on_tile,
                    ops::Tiling::kSerialAcrossHosts);
  }
}

void GemmRsImpl::add_bias(int64_t m, const void* bias, int64_t r0, int64_t r1, char* partials) {
  // The bias joins rank r's own partial of block r only, so it is added exactly once, in the
  // accumulation dtype, before the fixed-order sum.
  if (bias == nullptr) return;
  const int r = ctx_->world_rank();
  const int64_t rows = m / ctx_->world_size();
  const std::size_t row = static_cast<std::size_t>(opts_.n) * dtype_size(acc_);
  char* own = (partials != nullptr ? partials + row * rows * r : partial(r, m)) + row * r0;
  kernels::add_bias(acc_, own, (r1 < 0 ? rows : r1) - r0, opts_.n, bias, opts_.output_dtype);
}

void GemmRsImpl::sum_payloads(int64_t m, void* output) {
  const int64_t count = m / ctx_->world_size() * opts_.n;
  reduce_.sum_payloads(*core_, acc_, opts_.output_dtype,
                       static_cast<std::size_t>(count) * dtype_size(acc_), count, output);
}

void GemmRsImpl::reduce(int64_t m, void* output) {
  const int64_t count = m / ctx_->world_size() * opts_.n;
  reduce_.reduce(acc_, acc_, opts_.output_dtype, count, [&](int t) { return partial(t, m); },
                 output);
}

void GemmRsImpl::begin(int64_t m) {
  const std::size_t blk =
      static_cast<std::size_t>(m / ctx_->world_size()) * opts_.n * dtype_size(acc_);
  reduce_.begin(*core_, blk, blk, /*direct=*/true);
}

void GemmRsImpl::forward(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output) {
  ops::CallDescriptor d;
  d.fields = {m, bias != nullptr, 0, 0};  // whether a bias was passed is agreed
  d.error = ops::check_forward(*ctx_, kOp, m, opts_.max_m,
                               {{"input", input}, {"weight", weight}, {"output", output}});
  if (d.error.empty() && packed_ != nullptr)
    d.error = ops::check_packed(*ctx_, kOp, *packed_, opts_.input_dtype, opts_.n, opts_.k,
                                opts_.transpose_weight);
  // The latency path (decode sizes on one host, or across hosts of one rank each): the partials,
  // computed as the one-call path below computes them, ride on the handshake; every rank then
  // sums its block in the same order from the payloads — the same bits, one exchange.
  const std::size_t partial_bytes = static_cast<std::size_t>(m) * opts_.n * dtype_size(acc_);
  const bool latency = d.error.empty() && m > 0 && m <= ops::kMinTileRows &&
                       partial_bytes <= core_->handshake().payload_bytes();
  if (latency)
    d.payload = [&](char* slot) {
      ops::prepare_weight(weight_, packed_, ops::gemm_shape(opts_), weight);
      kernels::GemmOut o;
      o.c = slot;
      o.ldc = opts_.n;
      o.dtype = acc_;
      kernels::gemm_tile(weight_, input, opts_.k, m, 0, opts_.n, o);
      add_bias(m, bias, 0, -1, slot);
    };
  if (latency) d.payload_len = partial_bytes;  // across hosts only these bytes travel
  core_->run(ops::Path::kFused, d, m == 0, [&](const ops::Call&) {
    ContextImpl& c = *ctx_;
    if (latency) return sum_payloads(m, output);
    begin(m);
    if (reduce_.direct()) {
      // Alone on the host: each tile of our own block is summed with the other hosts' partials
      // of its rows as soon as it is computed (while it is in cache), in the same order.
      const int64_t n = opts_.n;
      char* own = partial(c.world_rank(), m);
      compute(static_cast<const char*>(input), m, weight, /*publish=*/true,
              [&](int64_t r0, int64_t r1) {
                add_bias(m, bias, r0, r1);
                reduce_.reduce_range(acc_, opts_.output_dtype, r0 * n, r1 * n, own, output);
              });
    } else if (reduce_.presums()) {
      compute_offloaded(static_cast<const char*>(input), m, weight, bias, output);
    } else {
      compute(static_cast<const char*>(input), m, weight, /*publish=*/true);
      add_bias(m, bias);
      reduce(m, output);
    }
  });
}

void GemmRsImpl::forward(const void* input, int64_t m, const kernels::PackedWeight& weight,
                         const void* bias, void* output) {
  ops::with_packed(packed_, weight,
                   [&] { forward(input, m, static_cast<const void*>(&weight), bias, output); });
}

void GemmRsImpl::compute_offloaded(const char* input, int64_t m, const void* weight,
                                   const void* bias, void* output) {
  // Copy offload on one host: a comm stream sums the peers' partials of our block as they land
  // while this thread computes; our own partial, computed last, is added at the end.
  const int64_t count = m / ctx_->world_size() * opts_.n;
  ops::Offload copies(*ctx_);
  reduce_.start_presum(copies, acc_, count);
  compute(input, m, weight, /*publish=*/true);
  add_bias(m, bias);
  reduce_.finish_presum(copies, acc_, partial(ctx_->world_rank(), m), opts_.output_dtype, output,
                        count);
}

void GemmRsImpl::forward_gemm_only(const void* input, int64_t m, const void* weight) {
  ops::CallDescriptor d;
  d.error = ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"input", input}, {"weight", weight}});
  // The partials live in our segment: the core first waits until host peers are done reducing
  // the last call's.
  core_->run(ops::Path::kGemmOnly, d, m == 0, [&](const ops::Call&) {
    compute(static_cast<const char*>(input), m, weight, /*publish=*/false);
  });
}

void GemmRsImpl::forward_comm_only(int64_t m, const void* bias, void* output) {
  ops::CallDescriptor d;
  d.fields = {m, bias != nullptr, 0, 0};  // whether a bias was passed is agreed
  d.error = ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"output", output}});
  core_->run(ops::Path::kCommOnly, d, m == 0, [&](const ops::Call&) {
    // The partials are whatever the last gemm-only left: publish them for this call.
    begin(m);
    add_bias(m, bias);
    for (int t = 0; t < ctx_->world_size(); ++t)
      if (t != ctx_->world_rank()) reduce_.share(t).publish_all();
    reduce(m, output);
  });
}

}  // namespace detail
}  // namespace fluxcpp
