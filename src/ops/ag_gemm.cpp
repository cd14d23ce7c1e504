#include "ops/ag_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "ops/offload.hpp"
#include "ops/op_checks.hpp"
#include "ops/parallel_gemm.hpp"

namespace fluxcpp {
namespace detail {

namespace {
constexpr const char* kOp = "ag_gemm";
}  // namespace

AgGemmImpl::AgGemmImpl(std::shared_ptr<ContextImpl> ctx, const AgGemmOptions& o,
                       const std::string& local_error)
    : ctx_(std::move(ctx)), opts_(o) {
  ContextImpl& c = *ctx_;
  MPI_Comm comm = c.comm();
  ops::check_gemm_create(
      c, kOp, {o.max_m, o.n, o.k, o.input_dtype, o.output_dtype, o.transpose_weight}, local_error,
      [&] {
        const int mode = static_cast<int>(o.mode);
        FLUXCPP_CHECK_ARG(mode >= 0 && mode <= 2, "{}: mode={} is not an AgGemmMode", kOp, mode);
      });
  mode_ = o.mode != AgGemmMode::kAuto ? o.mode : static_cast<AgGemmMode>(c.config().ag_gemm_mode);
  comm::agree_value(comm, kOp, "mode", static_cast<int>(mode_));

  in_row_ = static_cast<std::size_t>(o.k) * dtype_size(o.input_dtype);
  out_row_ = static_cast<std::size_t>(o.n) * dtype_size(o.output_dtype);
  const std::size_t max_block = static_cast<std::size_t>(o.max_m / c.world_size()) * in_row_;
  ex_.emplace(c, kOp, max_block, 0, std::array<const char*, 4>{"m", "", "", ""},
              /*probe_cma=*/false);
  // The gather buffer is allocated here, agreed, so a failed allocation cannot strand the peers
  // of a forward.
  comm::agree(comm, [&] { local_.resize(static_cast<std::size_t>(o.max_m) * in_row_); });
  // Runs of consecutive world ranks on this host: one GEMM each in gather mode.
  std::vector<int> host(c.node_size());
  for (int q = 0; q < c.node_size(); ++q) host[q] = c.world_rank_of(c.node_id(), q);
  std::sort(host.begin(), host.end());
  for (std::size_t a = 0; a < host.size();) {
    std::size_t b = a + 1;
    while (b < host.size() && host[b] == host[b - 1] + 1) ++b;
    host_runs_.emplace_back(host[a], static_cast<int64_t>(b - a));
    a = b;
  }
  // Our workers are the parallelism: each BLAS call runs on one thread (see docs/design.md).
  kernels::blas_set_threads(1);
}

std::string AgGemmImpl::validate(const void* input, int64_t m, const void* weight,
                                 const void* output, Path path) const {
  if (path == Path::kCommOnly)
    return ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"input", input}});
  return ops::check_forward(*ctx_, kOp, m, opts_.max_m,
                            {{"input", input}, {"weight", weight}, {"output", output}});
}

void AgGemmImpl::forward(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output, void* gathered_input) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, weight, output, Path::kFused));
  if (m == 0) return;
  ex.guarded([&] {
    run(Path::kFused, static_cast<const char*>(input), m, weight, bias, static_cast<char*>(output),
        static_cast<char*>(gathered_input));
  });
}

void AgGemmImpl::forward_comm_only(const void* input, int64_t m, void* gathered_input) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, nullptr, nullptr, Path::kCommOnly));
  if (m == 0) return;
  ex.guarded([&] {
    run(Path::kCommOnly, static_cast<const char*>(input), m, nullptr, nullptr, nullptr,
        static_cast<char*>(gathered_input));
  });
}

void AgGemmImpl::forward_gemm_only(const void* input, int64_t m, const void* weight,
                                   const void* bias, void* output) {
  // Local: no handshake, no waits. Rows of other ranks are whatever the buffers hold.
  ex_->check_local(validate(input, m, weight, output, Path::kGemmOnly));
  if (m == 0) return;
  run(Path::kGemmOnly, static_cast<const char*>(input), m, weight, bias, static_cast<char*>(output),
      nullptr);
}

void AgGemmImpl::gemm(const char* a, int64_t rows, const void* bias, char* out) {
  kernels::GemmOut o;
  o.c = out;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = bias;
  ops::parallel_gemm(*ctx_, weight_, a, opts_.k, rows, 0, opts_.n, o);
}

bool AgGemmImpl::gathers(int64_t rows) const {
  // Each BLAS call repacks the whole weight (n x k), so computing block by block costs one
  // repack per rank; gathering first costs a copy of the rows (rows x k per peer) and allows a
  // single call. Gather when the weight is at least as wide as a rank's block is tall.
  if (mode_ == AgGemmMode::kCopy) return true;
  if (mode_ == AgGemmMode::kZeroCopy) return false;
  return opts_.n >= rows;
}

void AgGemmImpl::run(Path path, const char* input, int64_t m, const void* weight, const void* bias,
                     char* output, char* gathered) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id(), r = c.world_rank();
  const int64_t rows = m / W;
  const std::size_t blk = static_cast<std::size_t>(rows) * in_row_;
  const bool comm = path != Path::kGemmOnly, compute = path != Path::kCommOnly;
  const bool gemm_only = path == Path::kGemmOnly;
  // Gather mode: the host's rows are first copied, in global order, into one private buffer.
  const bool gather = gathers(rows) || path == Path::kCommOnly;
  // comm-only gathers straight into the caller's buffer; a forward gathers into ours, so that
  // gemm-only can redo exactly its GEMM later, and copies out only when asked to.
  const bool direct = path == Path::kCommOnly && gathered != nullptr;
  char* local = direct ? gathered : local_.data();
  if (compute) weight_.prepare(opts_.input_dtype, weight, opts_.n, opts_.k, opts_.transpose_weight);
  auto out_block = [&](int g) { return output + static_cast<std::size_t>(g) * rows * out_row_; };
  const ops::Deadline deadline = c.deadline();

  // 1. Publish our rows: host peers read them from our segment, MPI sends them from there.
  // With copy offload a comm stream stages them chunk by chunk while this thread computes.
  const bool offload = comm && compute && c.config().copy_offload && (L > 1 || N > 1);
  ops::Offload copies(c);
  if (offload)
    copies.start([&] { ex.stage_chunks(input, blk); });
  else if (comm && (L > 1 || N > 1))
    ex.stage(input, blk);
  if (comm && N > 1) ex.start_rail(blk, /*polite=*/compute, /*staged_later=*/offload);
  ops::BlockExchange::RailScope rail(ex, comm && N > 1);

  if (gather) {
    // 2g. Copy the host's rows into `local` (own first, then peers in ring order, chunk by chunk
    // as they land), then one GEMM per run of consecutive ranks — one call on a typical host.
    if (comm) {
      std::memcpy(local + blk * r, input, blk);
      const std::size_t chunk = ex.chunk_bytes();
      const uint64_t nchunks = ex.num_chunks(blk);
      for (int i = 1; i < L; ++i) {
        const int q = (me + i) % L;
        char* to = local + blk * c.world_rank_of(nid, q);
        for (uint64_t ch = 0; ch < nchunks;) {
          const uint64_t have = std::min(nchunks, ex.wait(q, nid, ch + 1, deadline, "block"));
          const std::size_t off = ch * chunk, end = std::min(blk, have * chunk);
          std::memcpy(to + off, ex.block(q, nid) + off, end - off);
          ch = have;
        }
      }
    }
    if (compute) {
      for (const auto& [first, count] : host_runs_)
        gemm(local + blk * first, rows * count, bias, out_block(first));
    }
  } else {
    // 2z. Zero copy: our own rows first (they need nothing from anyone), then host peers in ring
    // order read straight from their segments; each GEMM covers every row landed so far.
    gemm(input, rows, bias, out_block(r));
    const std::size_t chunk = ex.chunk_bytes();
    for (int i = 1; i < L; ++i) {
      const int q = (me + i) % L, g = c.world_rank_of(nid, q);
      int64_t done = 0;
      while (done < rows) {
        int64_t avail = rows;
        if (!gemm_only) {
          // Chunks needed to complete row `done`, then every row those chunks complete.
          const uint64_t need = ((done + 1) * in_row_ + chunk - 1) / chunk;
          const uint64_t have = ex.wait(q, nid, need, deadline, "block");
          avail =
              std::min<int64_t>(rows, static_cast<int64_t>(std::min(blk, have * chunk) / in_row_));
        }
        gemm(ex.block(q, nid) + done * in_row_, avail - done, bias, out_block(g) + done * out_row_);
        done = avail;
      }
    }
  }

  // 3. Rows of other hosts, received by MPI into the segments of this host's ranks: computed
  // (and gathered) block by block as they land, while later ones are still in flight.
  const uint64_t whole = ex.num_chunks(blk);
  for (int i = 1; i < N; ++i) {
    const int n = (nid + i) % N;
    for (int j = 0; j < L; ++j) {
      const int q = (me + j) % L, g = c.world_rank_of(n, q);
      if (comm) ex.wait(q, n, whole, deadline, "rail");
      if (compute) gemm(ex.block(q, n), rows, bias, out_block(g));
      if (path == Path::kCommOnly) std::memcpy(local + blk * g, ex.block(q, n), blk);
    }
  }

  // 4. The gathered input, when asked for.
  char* gout = direct || !comm ? nullptr : gathered;
  if (gout != nullptr) {
    if (gather) {
      // The host's rows are in `local`; other hosts' rows were copied there only by comm-only.
      std::memcpy(gout, local, static_cast<std::size_t>(m) * in_row_);
      if (path != Path::kCommOnly)
        for (int n = 0; n < N; ++n)
          for (int q = 0; q < L && n != nid; ++q)
            std::memcpy(gout + blk * c.world_rank_of(n, q), ex.block(q, n), blk);
    } else {
      std::memcpy(gout + blk * r, input, blk);
      for (int n = 0; n < N; ++n)
        for (int q = 0; q < L; ++q) {
          const int g = c.world_rank_of(n, q);
          if (g != r) std::memcpy(gout + blk * g, ex.block(q, n), blk);
        }
    }
  }
  if (offload) copies.finish();
  if (comm && N > 1) rail.finish();
}

}  // namespace detail

AgGemm::AgGemm(const Context& ctx, const AgGemmOptions& options)
    : impl_(std::make_unique<detail::AgGemmImpl>(ctx.impl(), options)) {}
AgGemm::AgGemm(AgGemm&&) noexcept = default;
AgGemm& AgGemm::operator=(AgGemm&&) noexcept = default;
AgGemm::~AgGemm() = default;

namespace {
detail::AgGemmImpl& checked(const std::unique_ptr<detail::AgGemmImpl>& p) {
  if (!p) raise(Errc::kInvalidUsage, "ag_gemm: use of a moved-from op");
  return *p;
}
}  // namespace

void AgGemm::forward(const void* input, int64_t m, const void* weight, const void* bias,
                     void* output, void* gathered_input) {
  checked(impl_).forward(input, m, weight, bias, output, gathered_input);
}
void AgGemm::forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                               void* output) {
  checked(impl_).forward_gemm_only(input, m, weight, bias, output);
}
void AgGemm::forward_comm_only(const void* input, int64_t m, void* gathered_input) {
  checked(impl_).forward_comm_only(input, m, gathered_input);
}
const AgGemmOptions& AgGemm::options() const {
  return checked(impl_).options();
}

}  // namespace fluxcpp
