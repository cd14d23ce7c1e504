#include "ops/ag_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"

namespace fluxcpp {
namespace detail {

namespace {

constexpr const char* kOp = "ag_gemm";

bool valid_pair(DType in, DType out) {
  return (in == DType::kFloat32 && out == DType::kFloat32) ||
         (in == DType::kFloat64 && out == DType::kFloat64) ||
         (in == DType::kBFloat16 && (out == DType::kBFloat16 || out == DType::kFloat32));
}

}  // namespace

AgGemmImpl::AgGemmImpl(std::shared_ptr<ContextImpl> ctx, const AgGemmOptions& o,
                       const std::string& local_error)
    : ctx_(std::move(ctx)), opts_(o) {
  ContextImpl& c = *ctx_;
  if (c.closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", kOp);
  MPI_Comm comm = c.comm();
  comm::agree(comm, [&] {
    if (!local_error.empty())
      raise(Errc::kInvalidArgument, "{}: {} (rank {})", kOp, local_error, c.world_rank());
    FLUXCPP_CHECK_ARG(dtype_valid(o.input_dtype) && dtype_valid(o.output_dtype) &&
                          valid_pair(o.input_dtype, o.output_dtype),
                      "{}: (input, output) dtypes ({}, {}) are not one of (f32, f32), (f64, f64), "
                      "(bf16, bf16), (bf16, f32) (rank {})",
                      kOp, dtype_name(o.input_dtype), dtype_name(o.output_dtype), c.world_rank());
    FLUXCPP_CHECK_ARG(o.n >= 1 && o.k >= 1, "{}: n={} and k={} must be >= 1 (rank {})", kOp, o.n,
                      o.k, c.world_rank());
    FLUXCPP_CHECK_ARG(o.max_m >= 0, "{}: max_m={} must be >= 0", kOp, o.max_m);
    FLUXCPP_CHECK_ARG(o.max_m <= (int64_t{1} << 40) / std::max(o.k, o.n),
                      "{}: max_m={} with k={}, n={} is too large", kOp, o.max_m, o.k, o.n);
    FLUXCPP_CHECK_ARG(o.n <= INT32_MAX && o.k <= INT32_MAX && o.max_m <= INT32_MAX,
                      "{}: n, k and max_m must fit BLAS's int", kOp);
    int mode = static_cast<int>(o.mode);
    FLUXCPP_CHECK_ARG(mode >= 0 && mode <= 2, "{}: mode={} is not an AgGemmMode", kOp, mode);
  });
  comm::agree_value(comm, kOp, "max_m", o.max_m);
  comm::agree_value(comm, kOp, "k", o.k);
  comm::agree_value(comm, kOp, "n", o.n);
  comm::agree_value(comm, kOp, "input_dtype", static_cast<int>(o.input_dtype));
  comm::agree_value(comm, kOp, "output_dtype", static_cast<int>(o.output_dtype));
  comm::agree_value(comm, kOp, "transpose_weight", o.transpose_weight ? 1 : 0);
  mode_ = o.mode != AgGemmMode::kAuto ? o.mode
          : c.config().ag_gemm_mode != 0 ? static_cast<AgGemmMode>(c.config().ag_gemm_mode)
                                         : AgGemmMode::kZeroCopy;
  comm::agree_value(comm, kOp, "mode", static_cast<int>(mode_));

  in_row_ = static_cast<std::size_t>(o.k) * dtype_size(o.input_dtype);
  out_row_ = static_cast<std::size_t>(o.n) * dtype_size(o.output_dtype);
  const std::size_t max_block = static_cast<std::size_t>(o.max_m / c.world_size()) * in_row_;
  ex_.emplace(c, kOp, max_block, 0, std::array<const char*, 4>{"m", "", "", ""},
              /*probe_cma=*/false);
  landed_ = std::make_unique<shm::Signal[]>(c.node_size());
  // Our workers are the parallelism: each BLAS call runs on one thread (see docs/design.md).
  kernels::blas_set_threads(1);
}

std::string AgGemmImpl::validate(const void* input, int64_t m, const void* weight,
                                 const void* output, Path path) const {
  const int W = ctx_->world_size(), r = ctx_->world_rank();
  if (m < 0 || m > opts_.max_m)
    return fmt::format("{}: m={} must be in [0, max_m={}] (rank {})", kOp, m, opts_.max_m, r);
  if (m % W != 0)
    return fmt::format("{}: m={} is not divisible by the world size {} (rank {})", kOp, m, W, r);
  if (m > 0 && input == nullptr) return fmt::format("{}: input is NULL with m={} (rank {})", kOp, m, r);
  if (m > 0 && path != Path::kCommOnly && weight == nullptr)
    return fmt::format("{}: weight is NULL with m={} (rank {})", kOp, m, r);
  if (m > 0 && path != Path::kCommOnly && output == nullptr)
    return fmt::format("{}: output is NULL with m={} (rank {})", kOp, m, r);
  return {};
}

void AgGemmImpl::forward(const void* input, int64_t m, const void* weight, const void* bias,
                         void* output, void* gathered_input) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, weight, output, Path::kFused));
  if (m == 0) return;
  try {
    run(Path::kFused, static_cast<const char*>(input), m, weight, bias, static_cast<char*>(output),
        static_cast<char*>(gathered_input));
  } catch (...) {
    ex.mark_broken();
    throw;
  }
}

void AgGemmImpl::forward_comm_only(const void* input, int64_t m, void* gathered_input) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, nullptr, nullptr, Path::kCommOnly));
  if (m == 0) return;
  try {
    run(Path::kCommOnly, static_cast<const char*>(input), m, nullptr, nullptr, nullptr,
        static_cast<char*>(gathered_input));
  } catch (...) {
    ex.mark_broken();
    throw;
  }
}

void AgGemmImpl::forward_gemm_only(const void* input, int64_t m, const void* weight,
                                   const void* bias, void* output) {
  // Local: no handshake, no waits. Rows of other ranks are whatever the buffers hold.
  ex_->check_usable();
  std::string err = validate(input, m, weight, output, Path::kGemmOnly);
  if (!err.empty()) throw Error(Errc::kInvalidArgument, err);
  if (m == 0) return;
  run(Path::kGemmOnly, static_cast<const char*>(input), m, weight, bias, static_cast<char*>(output),
      nullptr);
}

void AgGemmImpl::gemm(const char* a, int64_t rows, const void* bias, char* out) {
  if (rows <= 0) return;
  ContextImpl& c = *ctx_;
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = bias;
  const int T = std::max(1, std::min<int>(c.num_compute_workers(), static_cast<int>(opts_.n / 64)));
  if (T <= 1) {
    o.c = out;
    kernels::gemm_tile(weight_, a, opts_.k, rows, 0, opts_.n, o);
    return;
  }
  // Column slabs, one per worker, multiples of 16 columns: each worker packs only its part of
  // the weight and writes only its part of the output.
  const int64_t slab = (opts_.n / T + 15) / 16 * 16;
  std::vector<uint64_t> tickets;
  for (int t = 1; t < T; ++t) {
    const int64_t n0 = std::min<int64_t>(opts_.n, t * slab), n1 = std::min<int64_t>(opts_.n, n0 + slab);
    if (n0 >= n1) break;
    kernels::GemmOut ot = o;
    ot.c = out + n0 * dtype_size(opts_.output_dtype);
    tickets.push_back(c.compute_worker(t).enqueue(
        [this, a, rows, n0, n1, ot] { kernels::gemm_tile(weight_, a, opts_.k, rows, n0, n1, ot); }));
  }
  o.c = out;
  std::exception_ptr failed;
  try {
    kernels::gemm_tile(weight_, a, opts_.k, rows, 0, std::min<int64_t>(opts_.n, slab), o);
  } catch (...) {
    failed = std::current_exception();
  }
  const auto forever = std::chrono::steady_clock::time_point::max();
  for (std::size_t i = 0; i < tickets.size(); ++i) {
    try {
      c.compute_worker(static_cast<int>(i) + 1).wait(tickets[i], forever);
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

uint64_t AgGemmImpl::start_copies(std::size_t block_bytes, char* dst) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const uint64_t e = ex.epoch();
  const ops::Deadline deadline = c.deadline();
  copy_abort_.store(false);
  comm::Stream& stream = c.comm_stream(c.num_comm_streams() > 1 ? 1 : 0);
  return stream.enqueue([this, &c, &ex, e, deadline, block_bytes, dst] {
    const int L = c.node_size(), me = c.node_rank(), nid = c.node_id();
    const std::size_t chunk = ex.chunk_bytes();
    const uint64_t nchunks = ex.num_chunks(block_bytes);
    for (int i = 1; i < L && !copy_abort_.load(); ++i) {
      const int q = (me + i) % L;
      char* to = dst + block_bytes * c.world_rank_of(nid, q);
      for (uint64_t ch = 0; ch < nchunks && !copy_abort_.load(); ++ch) {
        ex.wait(q, nid, ch + 1, deadline, "block");
        const std::size_t off = ch * chunk, len = std::min(chunk, block_bytes - off);
        std::memcpy(to + off, ex.block(q, nid) + off, len);
        shm::signal_set(landed_[q], ops::BlockExchange::progress_value(e, ch + 1));
      }
    }
  });
}

void AgGemmImpl::run(Path path, const char* input, int64_t m, const void* weight, const void* bias,
                     char* output, char* gathered) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id();
  const int64_t rows = m / W;
  const std::size_t blk = static_cast<std::size_t>(rows) * in_row_;
  const bool fused = path == Path::kFused, gemm_only = path == Path::kGemmOnly;
  const bool comm = !gemm_only;
  const bool compute = path != Path::kCommOnly;
  const bool copy_mode = mode_ == AgGemmMode::kCopy && L > 1;
  // Where copy mode (and comm-only) lands host peers' rows: the caller's gathered_input or ours.
  char* local = gathered;
  if (((copy_mode && !gemm_only) || path == Path::kCommOnly) && local == nullptr) {
    local_.resize(static_cast<std::size_t>(opts_.max_m) * in_row_);
    local = local_.data();
  }
  if (compute) weight_.prepare(opts_.input_dtype, weight, opts_.n, opts_.k, opts_.transpose_weight);
  auto out_block = [&](int g) { return output + static_cast<std::size_t>(g) * rows * out_row_; };

  // 1. Publish our rows: host peers read them from our segment, MPI sends them from there.
  if (comm && (L > 1 || N > 1)) ex.stage(input, blk);
  if (comm && N > 1) ex.start_rail(blk);
  ops::BlockExchange::RailScope rail(ex, comm && N > 1);
  uint64_t copy_ticket = 0;
  if (comm && (copy_mode || (path == Path::kCommOnly && L > 1))) copy_ticket = start_copies(blk, local);
  struct CopyScope {  // never leave the copy task running past this call
    AgGemmImpl* self;
    uint64_t ticket;
    comm::Stream* stream;
    void finish(bool rethrow) {
      if (ticket == 0) return;
      uint64_t t = std::exchange(ticket, 0);
      if (!stream->wait(t, std::chrono::steady_clock::time_point::max()) && rethrow)
        raise(Errc::kInternal, "{}: copy stream did not finish", kOp);
    }
    ~CopyScope() {
      if (ticket == 0) return;
      self->copy_abort_.store(true);
      try {
        finish(false);
      } catch (...) {
      }
    }
  } copies{this, copy_ticket, &c.comm_stream(c.num_comm_streams() > 1 ? 1 : 0)};

  const ops::Deadline deadline = c.deadline();
  // 2. Our own rows first: they need nothing from anyone.
  if (compute) gemm(input, rows, bias, out_block(c.world_rank()));

  // 3. Host peers in ring order; each GEMM covers every row that has landed so far.
  const std::size_t chunk = ex.chunk_bytes();
  for (int i = 1; i < L && compute; ++i) {
    const int q = (me + i) % L, g = c.world_rank_of(nid, q);
    // gemm-only reads the rows staged in the segments (the latest ones) in every mode.
    const char* src = copy_mode && !gemm_only ? local + blk * g : ex.block(q, nid);
    int64_t done = 0;
    while (done < rows) {
      int64_t avail = rows;
      if (!gemm_only) {
        // Chunks needed to complete row `done`, then every row those chunks complete.
        const uint64_t need = ((done + 1) * in_row_ + chunk - 1) / chunk;
        uint64_t have;
        if (copy_mode) {
          uint64_t observed = 0;
          const uint64_t want = ops::BlockExchange::progress_value(ex.epoch(), need);
          if (!shm::signal_wait(landed_[q], want, deadline, c.wait_policy(), &observed)) {
            copies.finish(true);  // the copy task's own error names the peer
            ops::raise_timeout(c, kOp, g, "copy landed", want, observed);
          }
          have = shm::signal_load(landed_[q]) & 0xffffffffu;
        } else {
          have = ex.wait(q, nid, need, deadline, "block");
        }
        avail = std::min<int64_t>(rows, static_cast<int64_t>(std::min(blk, have * chunk) / in_row_));
      }
      gemm(src + done * in_row_, avail - done, bias, out_block(g) + done * out_row_);
      done = avail;
    }
  }

  // 4. Rows of other hosts, received by MPI into the segments of this host's ranks.
  const uint64_t whole = ex.num_chunks(blk);
  for (int i = 1; i < N && compute; ++i) {
    const int n = (nid + i) % N;
    for (int j = 0; j < L; ++j) {
      const int q = (me + j) % L, g = c.world_rank_of(n, q);
      if (!gemm_only) ex.wait(q, n, whole, deadline, "rail");
      gemm(ex.block(q, n), rows, bias, out_block(g));
    }
  }

  // 5. The gathered input, when asked for (comm-only gathers into `local`).
  char* gout = path == Path::kCommOnly ? local : gathered;
  if (gout != nullptr && comm) {
    copies.finish(true);  // host peers' rows are in place when copies ran
    std::memcpy(gout + blk * c.world_rank(), input, blk);
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < L; ++j) {
        const int q = (me + j) % L, g = c.world_rank_of(n, q);
        if (g == c.world_rank() || (n == nid && copy_ticket != 0)) continue;
        ex.wait(q, n, n == nid ? ex.num_chunks(blk) : whole, deadline, n == nid ? "block" : "rail");
        std::memcpy(gout + blk * g, ex.block(q, n), blk);
      }
  }
  copies.finish(true);
  if (comm && N > 1) rail.finish();
  (void)fused;
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
const AgGemmOptions& AgGemm::options() const { return checked(impl_).options(); }

}  // namespace fluxcpp
