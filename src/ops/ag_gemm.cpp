#include "ops/ag_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/gemm_call.hpp"
#include "ops/core/offload.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/parallel_gemm.hpp"
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
  gather_ = ops::GatherExchange(c, links_, layout_, max_block, /*needed=*/true);
  // The latency path's payload: a rank's rows of a decode-sized call (latency()), on one host or
  // across hosts of one rank each.
  make_core(
      ops::OpCore::Spec::of(kOp, {"m"})
          .runs_gemm()
          .releasing()
          .with_payload(ops::latency_payload_bytes(links_, max_block, /*across_hosts=*/true)));
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
  // Decode sizes (the one-GEMM sizes: at most kMinTileRows rows in all) when the normal path
  // would gather the rows before one GEMM (so both paths run the same GEMM call on the same rows:
  // the same bits), and the rows fit the handshake payload (none alone or across hosts of more
  // than one rank: latency_payload_bytes). Across hosts this saves the normal path's second
  // exchange: the rows cross with the call's descriptor.
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
  d.payload_len = blk;  // across hosts only these bytes travel
}

void AgGemmImpl::run_latency(const ops::GemmCall& a) {
  // The gather path's rows in the gather buffer, in global order (where gemm-only finds them),
  // from the handshake payloads instead of the staged slots: no staging, no second signal round;
  // then its one GEMM over all m rows, which reads the weight once.
  const std::size_t blk = static_cast<std::size_t>(a.m / ctx_->world_size()) * in_row_;
  gather_.gather_payloads(*core_, local_.data(), a.input, blk);
  core_->skip_release();  // no rank read a peer's staged slot
  ops::prepare_weight(weight_, a.packed, ops::gemm_shape(opts_), a.weight);
  gemm(local_.data(), a.m, a.bias, a.output, /*tiles=*/false);
  if (a.moved != nullptr)
    std::memcpy(a.moved, local_.data(), static_cast<std::size_t>(a.m) * in_row_);
}

void AgGemmImpl::run(const ops::Call& call, const ops::GemmCall& a) {
  ContextImpl& c = *ctx_;
  const int r = c.world_rank();
  const int64_t rows = a.m / c.world_size();
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
  const std::size_t net_bytes = gather_.networked().size() * blk,
                    weight_bytes =
                        static_cast<std::size_t>(opts_.n * opts_.k) * dtype_size(opts_.input_dtype);
  const bool whole = gather && net_bytes > 0 && call.path != ops::Path::kCommOnly &&
                     (a.m <= ops::kMinTileRows || net_bytes < weight_bytes);
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
    if (compute && c.config().copy_offload && !a.zero_copy && gather_.read_by_others())
      copies.start([&] { gather_.stage(a.input, blk, /*zero_copy=*/false); });
    else
      gather_.stage(a.input, blk, a.zero_copy);
  }

  if (gather) {
    // 2g. Copy the host's rows into `local` (own first, then peers in ring order, chunk by chunk
    // as they land), then one GEMM per run of consecutive ranks — one call on a typical host.
    // The rows on the link follow: gathered for the one GEMM below (whole), or computed (and
    // gathered) chunk by chunk as they land while later ones are still in flight.
    if (comm) gather_.gather_host(local, a.input, blk);
    if (compute && !whole)
      for (const auto& [first, count] : gather_.host_runs())
        gemm(local + blk * first, rows * count, a.bias, out_block(first));
    if (whole && comm) gather_.drain_other_hosts(local, blk);
    if (!whole)
      for (int g : gather_.networked()) consume(g);
  } else {
    // 2z. Own rows first (they need nothing from anyone), then every peer as its rows land: host
    // peers in ring order, read straight from their segments, then the rows on the link.
    gemm(a.input, rows, a.bias, out_block(r));
    for (int g : gather_.others()) consume(g);
  }

  if (whole && compute) {
    // Nothing polls the transport during this one GEMM: finish this rank's sends first, so no
    // peer waits for our rows while we compute.
    if (comm) core_->finish_transfers();
    gemm(local, a.m, a.bias, out_block(0), /*tiles=*/false);
  }

  // 3. The gathered input, when asked for.
  if (!direct && comm && a.moved != nullptr)
    gather_.copy_out(a.moved, a.input, blk, gather ? local : nullptr);
  copies.finish();
}

}  // namespace detail
}  // namespace fluxcpp
