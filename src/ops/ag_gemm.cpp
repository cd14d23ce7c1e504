#include "ops/ag_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/parallel_gemm.hpp"
#include "ops/core/pimpl.hpp"
#include "ops/core/tiled_gemm.hpp"

namespace fluxcpp {
namespace detail {

namespace {
// FLUXCPP_AG_GEMM_MODE's values in AgGemmMode's order (parsed, and named when ranks disagree).
constexpr const char* kModeNames[] = {"auto", "zero_copy", "copy"};
constexpr int kModes = 3;
}  // namespace

void AgGemmImpl::create(ContextImpl& c, const std::string& local_error) {
  const AgGemmOptions o = opts_;
  comm::Group& comm = c.comm();
  ops::check_gemm_create(c, kOp, ops::gemm_shape(o), local_error, [&] {
    const int mode = static_cast<int>(o.mode);
    FLUXCPP_CHECK_ARG(mode >= 0 && mode <= 2, "{}: mode={} is not an AgGemmMode", kOp, mode);
    // The op's own setting (declared with the others, so --help-env lists it).
    mode_ = o.mode != AgGemmMode::kAuto
                ? o.mode
                : static_cast<AgGemmMode>(
                      env_choice("FLUXCPP_AG_GEMM_MODE", kModeNames, kModes));
  });
  comm::agree_choice(comm, kOp, "mode (FLUXCPP_AG_GEMM_MODE or the option)",
                     static_cast<int>(mode_), kModeNames, kModes);

  in_row_ = static_cast<std::size_t>(o.k) * dtype_size(o.input_dtype);
  out_row_ = static_cast<std::size_t>(o.n) * dtype_size(o.output_dtype);
  const std::size_t max_block = static_cast<std::size_t>(o.max_m / c.world_size()) * in_row_;
  // The staged slot always exists: it is also the zero-copy input buffer.
  gather_ = ops::GatherExchange(c, layout_, max_block, /*needed=*/true);
  // The latency path's payload: a rank's rows of a decode-sized call (latency()).
  make_core(ops::OpCore::Spec::of(kOp, {"m"})
                .runs_gemm()
                .releasing()
                .with_payload(ops::latency_payload_bytes(c, max_block)));
  // The gather buffer is allocated here, agreed, so a failed allocation cannot strand the peers
  // of a forward.
  comm::agree(comm, [&] {
    resize_or_raise(local_, static_cast<std::size_t>(o.max_m) * in_row_, kOp, "the gather buffer");
  });
}

void AgGemmImpl::gemm(const char* a, int64_t rows, const void* bias, char* out, bool tiles) {
  kernels::GemmOut o;
  o.c = out;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = bias;
  if (tiles)
    ops::tiled_gemm(*core_, weight_, a, opts_.k, rows, 0, opts_.n, o);
  else
    ops::parallel_gemm(*ctx_, weight_, a, opts_.k, rows, 0, opts_.n, o);
}

bool AgGemmImpl::gathers(int64_t rows) const {
  // Each GEMM call re-reads (and re-blocks) the whole weight (n x k), so computing block by block
  // costs one repack per rank; gathering first costs a copy of the rows (rows x k per peer) and
  // allows a single call. Gather when the weight is at least as wide as a rank's block is tall.
  if (mode_ == AgGemmMode::kCopy) return true;
  if (mode_ == AgGemmMode::kZeroCopy) return false;
  return opts_.n >= rows;
}

bool AgGemmImpl::latency(int64_t m) const {
  // Decode sizes (the one-GEMM sizes: at most kMinTileRows rows in all) on one host, when the
  // normal path would gather the rows before one GEMM (so both paths run the same GEMM call on
  // the same rows: the same bits), and the rows fit the handshake payload (none alone or across
  // hosts: latency_payload_bytes).
  const int W = ctx_->world_size();
  const std::size_t blk = static_cast<std::size_t>(m / W) * in_row_;
  return latency_enabled_.load() && m > 0 && m <= ops::kMinTileRows && gathers(m / W) &&
         blk <= core_->handshake().payload_bytes();
}

void AgGemmImpl::latency_payload(const ops::GemmCall& a, ops::CallDescriptor& d) {
  if (!latency(a.m)) return;
  const std::size_t blk = static_cast<std::size_t>(a.m / ctx_->world_size()) * in_row_;
  const char* input = a.input;
  d.payload = [input, blk](char* slot) { std::memcpy(slot, input, blk); };
}

void AgGemmImpl::run_latency(const ops::GemmCall& a) {
  // The gather path's rows in the gather buffer, in global order (where gemm-only finds them),
  // from the handshake payloads instead of the staged slots: no staging, no second signal round;
  // then its one GEMM over all m rows, which reads the weight once.
  ContextImpl& c = *ctx_;
  const std::size_t blk = static_cast<std::size_t>(a.m / c.world_size()) * in_row_;
  char* local = local_.data();
  for (int q = 0; q < c.node_size(); ++q) {
    const int g = gather_.host()[q];
    std::memcpy(local + blk * g, g == c.world_rank() ? a.input : core_->handshake().payload(q),
                blk);
  }
  core_->skip_release();  // no rank read a peer's staged slot
  ops::prepare_weight(weight_, a.packed, ops::gemm_shape(opts_), a.weight);
  gemm(local, a.m, a.bias, a.output, /*tiles=*/false);
  if (a.moved != nullptr) std::memcpy(a.moved, local, static_cast<std::size_t>(a.m) * in_row_);
}

void AgGemmImpl::stage(const ops::Call& /*call*/, const ops::GemmCall& a, std::size_t blk) {
  ContextImpl& c = *ctx_;
  if (c.node_size() == 1 && c.num_nodes() == 1) return;  // nobody reads our block
  const ops::Outbox own = gather_.own();
  if (a.zero_copy) {  // the caller wrote it there
    own.publish_all();
    core_->poll();  // post the sends now, not after the first GEMM tile
    return;
  }
  // Chunk by chunk, each published at once: host peers and the transport start on the first.
  const std::size_t step = c.num_nodes() > 1 ? core_->transport()->chunk_bytes()
                                             : static_cast<std::size_t>(c.config().chunk_bytes);
  own.write(a.input, blk, step, [&] { core_->poll(); });
}

void AgGemmImpl::run(const ops::Call& call, const ops::GemmCall& a) {
  ContextImpl& c = *ctx_;
  const int W = c.world_size(), L = c.node_size();
  const int r = c.world_rank();
  const int64_t rows = a.m / W;
  const std::size_t blk = static_cast<std::size_t>(rows) * in_row_;
  const bool comm = call.comm(), compute = call.compute();
  const bool gemm_only = call.path == ops::Path::kGemmOnly;
  if (call.path == ops::Path::kFused && latency(a.m)) return run_latency(a);
  // Gather mode: the host's rows are first copied, in global order, into one private buffer.
  const bool gather = gathers(rows) || call.path == ops::Path::kCommOnly;
  // One GEMM over every host's rows, gathered first (the unfused order, in one op), when
  // splitting cannot pay: at decode sizes (at most kMinTileRows rows: a GEMM per block would read
  // the weight once per block), and when the rows other hosts send are fewer bytes than the
  // weight. Every split re-reads (and re-blocks) the weight, and over TCP only part of the
  // transfer hides behind compute (the socket copies run on the same core), so splitting to
  // overlap a transfer smaller than the weight costs more than it hides (docs/benchmarks.md).
  const std::size_t remote_bytes = static_cast<std::size_t>(W - L) * blk,
                    weight_bytes =
                        static_cast<std::size_t>(opts_.n * opts_.k) * dtype_size(opts_.input_dtype);
  const bool whole = gather && c.num_nodes() > 1 && call.path != ops::Path::kCommOnly &&
                     (a.m <= ops::kMinTileRows || remote_bytes < weight_bytes);
  // comm-only gathers straight into the caller's buffer; a forward gathers into ours, so that
  // gemm-only can redo exactly its GEMM later, and copies out only when asked to.
  const bool direct = call.path == ops::Path::kCommOnly && a.moved != nullptr;
  char* local = direct ? a.moved : local_.data();
  if (compute && a.packed != nullptr)
    weight_.prepare(*a.packed);
  else if (compute)
    weight_.prepare(opts_.input_dtype, a.weight, opts_.n, opts_.k, opts_.transpose_weight);
  auto out_block = [&](int g) { return a.output + static_cast<std::size_t>(g) * rows * out_row_; };
  // Rows of a peer are computed in batches of at least a row tile as they land: every GEMM call
  // re-reads the weight, so one per transport chunk (a few rows) would cost more than it hides.
  const int64_t batch = compute ? ops::fixed_tile_rows(opts_.n, opts_.k) : 1;

  // Peer g's rows as they land, at least `batch` rows a step: through the GEMM when computing,
  // into `local` on the comm-only path. Gemm-only reads what the buffers hold.
  auto consume = [&](int g) {
    if (gemm_only) return gemm(gather_.data_of(g), rows, a.bias, out_block(g));
    const ops::Inbox in = gather_.from(g);
    for (int64_t done = 0; done < rows;) {
      const std::size_t have =
          in.wait(static_cast<std::size_t>(std::min(rows, done + batch)) * in_row_);
      const int64_t avail = static_cast<int64_t>(have / in_row_);
      if (compute)
        gemm(in.data() + done * in_row_, avail - done, a.bias, out_block(g) + done * out_row_);
      if (call.path == ops::Path::kCommOnly)
        std::memcpy(local + blk * g + done * in_row_, in.data() + done * in_row_,
                    static_cast<std::size_t>(avail - done) * in_row_);
      done = avail;
    }
  };

  // 1. Publish our rows. With copy offload a comm stream stages them while this thread computes
  // (the transport's sends wait for each chunk's signal either way).
  ops::Offload copies(c);
  if (comm) {
    gather_.begin(*core_, blk);
    if (compute && c.config().copy_offload && !a.zero_copy && (L > 1 || c.num_nodes() > 1))
      copies.start([&] { stage(call, a, blk); });
    else
      stage(call, a, blk);
  }

  if (gather) {
    // 2g. Copy the host's rows into `local` (own first, then peers in ring order, chunk by chunk
    // as they land), then one GEMM per run of consecutive ranks — one call on a typical host.
    if (comm) {
      std::memcpy(local + blk * r, a.input, blk);
      for (int g : gather_.host_peers()) gather_.from(g).drain(local + blk * g, 0, blk);
    }
    if (compute && !whole)
      for (const auto& [first, count] : gather_.host_runs())
        gemm(local + blk * first, rows * count, a.bias, out_block(first));
  } else {
    // 2z. Own rows first (they need nothing from anyone), then host peers in ring order, read
    // straight from their segments; each GEMM covers every row landed so far.
    gemm(a.input, rows, a.bias, out_block(r));
    for (int g : gather_.host_peers()) consume(g);
  }

  // 3. Rows of other hosts, received by MPI into the segments of this host's ranks: computed
  // (and gathered) chunk by chunk as they land, while later ones are still in flight.
  for (int g : gather_.remote()) {
    if (whole && !comm) break;
    if (whole) {  // gathered with the rest, for the one GEMM below
      gather_.from(g).drain(local + blk * g, 0, blk);
      continue;
    }
    consume(g);
  }

  if (whole && compute) {
    // Nothing polls the transport during this one GEMM: finish this rank's sends first, so no
    // peer waits for our rows while we compute.
    if (comm && core_->transfers_pending()) core_->transport()->complete(c.deadline());
    gemm(local, a.m, a.bias, out_block(0), /*tiles=*/false);
  }

  // 4. The gathered input, when asked for.
  char* gout = direct || !comm ? nullptr : a.moved;
  if (gout != nullptr) {
    std::memcpy(gout + blk * r, a.input, blk);
    for (int g : gather_.host_peers())
      std::memcpy(gout + blk * g, gather ? local + blk * g : gather_.data_of(g), blk);
    for (int g : gather_.remote()) std::memcpy(gout + blk * g, gather_.data_of(g), blk);
  }
  copies.finish();
}

}  // namespace detail

AgGemm::AgGemm(const Context& ctx, const AgGemmOptions& options)
    : impl_(ops::make_op<detail::AgGemmImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(AgGemm, AgGemmOptions, "ag_gemm");
FLUXCPP_PUBLIC_INPUT_BUFFER(AgGemm, "ag_gemm")

void AgGemm::forward(const void* input, int64_t m, const void* weight, const void* bias,
                     void* output, void* gathered_input) {
  ops::checked(impl_, "ag_gemm").forward(input, m, weight, bias, output, gathered_input);
}
void AgGemm::forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
                     void* output, void* gathered_input) {
  ops::checked(impl_, "ag_gemm").forward(input, m, weight.impl(), bias, output, gathered_input);
}
void AgGemm::forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                               void* output) {
  ops::checked(impl_, "ag_gemm").forward_gemm_only(input, m, weight, bias, output);
}
void AgGemm::forward_comm_only(const void* input, int64_t m, void* gathered_input) {
  ops::checked(impl_, "ag_gemm").forward_comm_only(input, m, gathered_input);
}

}  // namespace fluxcpp
