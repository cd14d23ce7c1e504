#include "ops/ag_gemm.hpp"

#include <algorithm>
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

namespace {
// FLUXCPP_AG_GEMM_MODE's values in AgGemmMode's order (parsed, and named when ranks disagree).
constexpr const char* kModeNames[] = {"auto", "zero_copy", "copy"};
constexpr int kModes = 3;
}  // namespace

void AgGemmImpl::create(const comm::Parts& c, const std::string& local_error) {
  const AgGemmOptions o = opts_;
  comm::Group& comm = c.control();
  ops::check_gemm_create(c, kOp, ops::gemm_shape(o), local_error, [&] {
    const int mode = static_cast<int>(o.mode);
    FLUXCPP_CHECK_ARG(mode >= 0 && mode <= 2, "{}: mode={} is not an AgGemmMode", kOp, mode);
    // The op's own setting (declared with the others, so --help-env lists it).
    mode_ = o.mode != AgGemmMode::kAuto
                ? o.mode
                : static_cast<AgGemmMode>(env_choice("FLUXCPP_AG_GEMM_MODE", kModeNames, kModes));
  });
  comm::agree_choice(comm, kOp, "mode (FLUXCPP_AG_GEMM_MODE or the option)",
                     static_cast<int>(mode_), kModeNames, kModes);

  in_row_ = static_cast<std::size_t>(o.k) * dtype_size(o.input_dtype);
  out_row_ = static_cast<std::size_t>(o.n) * dtype_size(o.output_dtype);
  const std::size_t max_block = static_cast<std::size_t>(o.max_m / c.topo().world_size()) * in_row_;
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
  const int W = ctx_->topo().world_size();
  const std::size_t blk = static_cast<std::size_t>(m / W) * in_row_;
  return latency_enabled_.load() && m > 0 && m <= ops::kMinTileRows && gathers(m / W) &&
         blk <= core_->handshake().payload_bytes();
}

AgGemmImpl::Schedule AgGemmImpl::plan(ops::Path path, const ops::GemmCall& a) const {
  using Kind = Schedule::Kind;
  Schedule s;
  s.path = path;
  // comm-only moves the rows as the gather schedule does (never whole: no GEMM to wait for).
  if (path == ops::Path::kCommOnly) return s.kind = Kind::kGather, s;
  if (path == ops::Path::kFused && latency(a.m)) return s.kind = Kind::kLatency, s;
  s.offload = path == ops::Path::kFused && ctx_->runtime().config().copy_offload && !a.zero_copy &&
              gather_.read_by_others();
  if (!gathers(rows(a))) return s.kind = Kind::kInPlace, s;
  // One GEMM over every host's rows, gathered first (the unfused order, in one op), when
  // splitting cannot pay: at decode sizes (at most kMinTileRows rows: a GEMM per block would read
  // the weight once per block), and when the rows other hosts send are fewer bytes than the
  // weight. Every split re-reads (and re-blocks) the weight, and over TCP only part of the
  // transfer hides behind compute (the socket copies run on the same core), so splitting to
  // overlap a transfer smaller than the weight costs more than it hides (docs/benchmarks.md).
  const std::size_t net_bytes = gather_.networked().size() * block(a),
                    weight_bytes =
                        static_cast<std::size_t>(opts_.n * opts_.k) * dtype_size(opts_.input_dtype);
  const bool whole = net_bytes > 0 && (a.m <= ops::kMinTileRows || net_bytes < weight_bytes);
  s.kind = whole ? Kind::kGatherWhole : Kind::kGather;
  return s;
}

void AgGemmImpl::latency_payload(const ops::GemmCall& a, ops::CallDescriptor& d) {
  if (schedule_.kind != Schedule::Kind::kLatency) return;
  const std::size_t blk = block(a);
  const char* input = a.input;
  d.payload = [input, blk](char* slot) { std::memcpy(slot, input, blk); };
  d.payload_len = blk;  // across hosts only these bytes travel
}

void AgGemmImpl::run(const ops::Call&, const ops::GemmCall& a) {
  const Schedule s = schedule_;
  if (s.path == ops::Path::kCommOnly) return run_comm_only(a);
  if (s.path == ops::Path::kGemmOnly) return run_gemm_only(s, a);
  switch (s.kind) {
    case Schedule::Kind::kLatency: return run_latency(a);
    case Schedule::Kind::kInPlace: return run_in_place(s, a);
    case Schedule::Kind::kGather:
    case Schedule::Kind::kGatherWhole: return run_gathered(s, a);
  }
}

void AgGemmImpl::run_latency(const ops::GemmCall& a) {
  // The gather path's rows in the gather buffer, in global order (where gemm-only finds them),
  // from the handshake payloads instead of the staged slots: no staging, no second signal round;
  // then its one GEMM over all m rows, which reads the weight once.
  gather_.gather_payloads(*core_, local_.data(), a.input, block(a));
  core_->skip_release();  // no rank read a peer's staged slot
  ops::prepare_weight(weight_, a.packed, ops::gemm_shape(opts_), a.weight);
  gemm(local_.data(), a.m, a.bias, a.output, /*tiles=*/false);
  if (a.moved != nullptr)
    std::memcpy(a.moved, local_.data(), static_cast<std::size_t>(a.m) * in_row_);
}

void AgGemmImpl::run_in_place(const Schedule& s, const ops::GemmCall& a) {
  // Own rows first (they need nothing from anyone), then every peer as its rows land: host peers
  // in ring order, read straight from their segments, then the rows on the link.
  ops::Offload copies(*ctx_);
  stage(s, a, copies);
  gemm(a.input, rows(a), a.bias, out_block(a, ctx_->topo().world_rank()));
  for (int g : gather_.others()) gemm_as_landed(g, a);
  copy_out(a, nullptr);
  copies.finish();
}

void AgGemmImpl::run_gathered(const Schedule& s, const ops::GemmCall& a) {
  // The host's rows copied, in global order, into one private buffer (own first, then peers in
  // ring order, chunk by chunk as they land).
  ops::Offload copies(*ctx_);
  stage(s, a, copies);
  gather_.gather_host(local_.data(), a.input, block(a));
  if (s.kind == Schedule::Kind::kGatherWhole) {
    gather_.drain_other_hosts(local_.data(), block(a));
    // Nothing polls the transport during this one GEMM: finish this rank's sends first, so no
    // peer waits for our rows while we compute.
    core_->finish_transfers();
    gemm(local_.data(), a.m, a.bias, a.output, /*tiles=*/false);
  } else {
    // One GEMM per run of consecutive ranks — one call on a typical host; then the rows on the
    // link, computed chunk by chunk as they land.
    gemm_host_runs(a, local_.data());
    for (int g : gather_.networked()) gemm_as_landed(g, a);
  }
  copy_out(a, local_.data());
  copies.finish();
}

void AgGemmImpl::run_comm_only(const ops::GemmCall& a) {
  // kGather's movement: straight into the caller's buffer when given (a forward gathers into
  // ours, so that gemm-only can redo exactly its GEMM later).
  const std::size_t blk = block(a);
  char* local = a.moved != nullptr ? a.moved : local_.data();
  gather_.begin(*core_, blk);
  gather_.stage(a.input, blk, a.zero_copy);
  gather_.gather_host(local, a.input, blk);
  gather_.drain_other_hosts(local, blk);
}

void AgGemmImpl::run_gemm_only(const Schedule& s, const ops::GemmCall& a) {
  // The schedule's GEMMs on whatever the buffers hold (no waits): peers' rows in their slots,
  // the gathered rows in ours.
  ops::prepare_weight(weight_, a.packed, ops::gemm_shape(opts_), a.weight);
  if (s.kind == Schedule::Kind::kGatherWhole)
    return gemm(local_.data(), a.m, a.bias, a.output, /*tiles=*/false);
  if (s.kind == Schedule::Kind::kInPlace)
    gemm(a.input, rows(a), a.bias, out_block(a, ctx_->topo().world_rank()));
  else
    gemm_host_runs(a, local_.data());
  const std::vector<int>& peers =
      s.kind == Schedule::Kind::kInPlace ? gather_.others() : gather_.networked();
  for (int g : peers) gemm(gather_.data_of(g), rows(a), a.bias, out_block(a, g));
}

void AgGemmImpl::stage(const Schedule& s, const ops::GemmCall& a, ops::Offload& copies) {
  // The transport's sends wait for each chunk's signal either way.
  ops::prepare_weight(weight_, a.packed, ops::gemm_shape(opts_), a.weight);
  const std::size_t blk = block(a);
  gather_.begin(*core_, blk);
  if (s.offload)
    copies.start([this, input = a.input, blk] { gather_.stage(input, blk, /*zero_copy=*/false); });
  else
    gather_.stage(a.input, blk, a.zero_copy);
}

void AgGemmImpl::gemm_as_landed(int g, const ops::GemmCall& a) {
  // At least a row tile a step: every GEMM call re-reads the weight, so one per transport chunk
  // (a few rows) would cost more than it hides.
  const int64_t rows = this->rows(a), batch = ops::fixed_tile_rows(opts_.n, opts_.k);
  const ops::Inbox in = gather_.from(g);
  for (int64_t done = 0; done < rows;) {
    const std::size_t have =
        in.wait(static_cast<std::size_t>(std::min(rows, done + batch)) * in_row_);
    const int64_t avail = static_cast<int64_t>(have / in_row_);
    gemm(in.data() + done * in_row_, avail - done, a.bias, out_block(a, g) + done * out_row_);
    done = avail;
  }
}

void AgGemmImpl::gemm_host_runs(const ops::GemmCall& a, const char* local) {
  for (const auto& [first, count] : gather_.host_runs())
    gemm(local + block(a) * first, rows(a) * count, a.bias, out_block(a, first));
}

void AgGemmImpl::copy_out(const ops::GemmCall& a, const char* local) {
  if (a.moved != nullptr) gather_.copy_out(a.moved, a.input, block(a), local);
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(AgGemm, AgGemmOptions);
FLUXCPP_PUBLIC_INPUT_BUFFER(AgGemm)

void AgGemm::forward(const void* input, int64_t m, const void* weight, const void* bias,
                     void* output, void* gathered_input) {
  ops::checked(impl_).forward(input, m, weight, bias, output, gathered_input);
}
void AgGemm::forward(const void* input, int64_t m, const PackedWeight& weight, const void* bias,
                     void* output, void* gathered_input) {
  ops::checked(impl_).forward(input, m, weight.impl(), bias, output, gathered_input);
}
void AgGemm::forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                               void* output) {
  ops::checked(impl_).forward_gemm_only(input, m, weight, bias, output);
}
void AgGemm::forward_comm_only(const void* input, int64_t m, void* gathered_input) {
  ops::checked(impl_).forward_comm_only(input, m, gathered_input);
}

}  // namespace fluxcpp
