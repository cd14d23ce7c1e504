#include "ops/ulysses.hpp"

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

constexpr const char* kGat = "gemm_a2a_transpose";
constexpr const char* kAtg = "a2a_transpose_gemm";

// Shapes of one call: every rank holds `rows` = bs · seq/W rows of the exchanged layout, and the
// block between two ranks is `rows` x `cols` with cols = nheads/W · head_dim.
struct Dims {
  int64_t bs, seq, s_loc, rows, heads_loc, head_dim, cols;
};

Dims dims(int W, int64_t bs, int64_t seq, int64_t nheads, int64_t head_dim) {
  const int64_t s_loc = seq / W, heads_loc = nheads / W;
  return {bs, seq, s_loc, bs * s_loc, heads_loc, head_dim, heads_loc * head_dim};
}

// Create-time checks of both ops (collective); `gemm` is the GEMM each rank runs at the maxima.
// `own`: the op's own name and value of the GEMM dimension it takes (hidden or n), agreed under
// that name before the generic checks.
void check_create(ContextImpl& c, const char* op, int64_t max_bs, int64_t max_seq, int64_t nheads,
                  int64_t head_dim, DType in, DType out, int64_t gemm_n, int64_t gemm_k,
                  std::pair<const char*, int64_t> own, const std::string& local_error) {
  if (c.closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", op);
  MPI_Comm comm = c.comm();
  comm::agree_value(comm, op, own.first, own.second);
  comm::agree_value(comm, op, "nheads", nheads);
  comm::agree_value(comm, op, "head_dim", head_dim);
  comm::agree_value(comm, op, "max_bs", max_bs);
  comm::agree_value(comm, op, "max_seq", max_seq);
  const int W = c.world_size();
  std::string err = local_error;
  constexpr int64_t kLarge = int64_t{1} << 31;
  if (!err.empty()) {
  } else if (nheads < 1 || head_dim < 1 || own.second < 1) {
    err = fmt::format("nheads={}, head_dim={} and {}={} must be >= 1", nheads, head_dim, own.first,
                      own.second);
  } else if (nheads % W != 0) {
    err = fmt::format("nheads={} is not divisible by the world size {}", nheads, W);
  } else if (max_bs < 0 || max_seq < 0) {
    err = fmt::format("max_bs={} and max_seq={} must be >= 0", max_bs, max_seq);
  } else if (max_bs >= kLarge || max_seq >= kLarge || nheads >= kLarge || head_dim >= kLarge ||
             nheads * head_dim >= kLarge || max_bs * (max_seq / W) >= kLarge) {
    err = fmt::format("max_bs={}, max_seq={}, nheads={}, head_dim={} are too large", max_bs,
                      max_seq, nheads, head_dim);
  }
  const bool sane = err.empty();
  ops::check_gemm_create(
      c, op,
      {sane ? max_bs * (max_seq / W) : 0, sane ? gemm_n : 1, sane ? gemm_k : 1, in, out, false},
      err);
}

std::string check_forward(const ContextImpl& c, const char* op, int64_t bs, int64_t seq,
                          int64_t max_bs, int64_t max_seq,
                          std::initializer_list<std::pair<const char*, const void*>> required) {
  const int W = c.world_size(), r = c.world_rank();
  if (bs < 0 || bs > max_bs)
    return fmt::format("{}: bs={} must be in [0, max_bs={}] (rank {})", op, bs, max_bs, r);
  if (seq < 0 || seq > max_seq)
    return fmt::format("{}: seq={} must be in [0, max_seq={}] (rank {})", op, seq, max_seq, r);
  if (seq % W != 0)
    return fmt::format("{}: seq={} is not divisible by the world size {} (rank {})", op, seq, W, r);
  if (bs > 0 && seq > 0)
    for (const auto& [name, ptr] : required)
      if (ptr == nullptr)
        return fmt::format("{}: {} is NULL with bs={}, seq={} (rank {})", op, name, bs, seq, r);
  return {};
}

// Across hosts: send slot t to every rank t of another host (once extra signal t reaches
// `ready`, or at once when ready == 0) and receive the block of every such rank s into slot
// W + s, raising extra signal W + s to the epoch.
void start_remote(ContextImpl& c, ops::BlockExchange& ex, std::size_t blk, uint64_t ready,
                  bool polite, bool now = false) {
  const int W = c.world_size(), me = c.node_rank(), nid = c.node_id();
  std::vector<ops::BlockExchange::Transfer> xfers;
  for (int t = 0; t < W; ++t) {
    if (c.node_of(t) == nid) continue;
    xfers.push_back(
        {true, t, ex.block(me, t), blk, ready ? &ex.extra_signal(me, t) : nullptr, ready});
    xfers.push_back({false, t, ex.block(me, W + t), blk, &ex.extra_signal(me, W + t), ex.epoch()});
  }
  ex.start_transfers(std::move(xfers), polite, now);
}

}  // namespace

// ---- GemmA2aTranspose ----------------------------------------------------------------------

GemmA2aTransposeImpl::GemmA2aTransposeImpl(std::shared_ptr<ContextImpl> ctx,
                                           const GemmA2aTransposeOptions& o,
                                           const std::string& local_error)
    : ctx_(std::move(ctx)), opts_(o) {
  ContextImpl& c = *ctx_;
  check_create(c, kGat, o.max_bs, o.max_seq, o.nheads, o.head_dim, o.input_dtype, o.output_dtype,
               o.nheads * o.head_dim, o.hidden, {"hidden", o.hidden}, local_error);
  const int W = c.world_size();
  const Dims d = dims(W, o.max_bs, o.max_seq, o.nheads, o.head_dim);
  ex_.emplace(c, kGat, static_cast<std::size_t>(d.rows * d.cols) * dtype_size(o.output_dtype),
              2 * W, std::array<const char*, 4>{"bs", "seq", "", ""}, /*probe_cma=*/false,
              c.num_nodes() > 1 ? 2 * W : W, /*always_slots=*/true);
  kernels::blas_set_threads(1);  // our workers are the parallelism (docs/design.md)
}

void GemmA2aTransposeImpl::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                                   const void* bias, void* output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({bs, seq, 0, 0},
           check_forward(*ctx_, kGat, bs, seq, opts_.max_bs, opts_.max_seq,
                         {{"input", input}, {"weight", weight}, {"output", output}}));
  if (bs * seq == 0) return;
  ex.guarded([&] {
    run(Path::kFused, static_cast<const char*>(input), bs, seq, weight, bias,
        static_cast<char*>(output));
  });
}

void GemmA2aTransposeImpl::forward_gemm_only(const void* input, int64_t bs, int64_t seq,
                                             const void* weight, const void* bias) {
  ex_->check_local(check_forward(*ctx_, kGat, bs, seq, opts_.max_bs, opts_.max_seq,
                                 {{"input", input}, {"weight", weight}}));
  if (bs * seq == 0) return;
  // The blocks are written into our segment: host peers must be done reading the last call's.
  ex_->wait_released();
  run(Path::kGemmOnly, static_cast<const char*>(input), bs, seq, weight, bias, nullptr);
}

void GemmA2aTransposeImpl::forward_comm_only(int64_t bs, int64_t seq, void* output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({bs, seq, 0, 0},
           check_forward(*ctx_, kGat, bs, seq, opts_.max_bs, opts_.max_seq, {{"output", output}}));
  if (bs * seq == 0) return;
  ex.guarded([&] {
    run(Path::kCommOnly, nullptr, bs, seq, nullptr, nullptr, static_cast<char*>(output));
  });
}

void GemmA2aTransposeImpl::run(Path path, const char* input, int64_t bs, int64_t seq,
                               const void* weight, const void* bias, char* output) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id(), r = c.world_rank();
  const Dims d = dims(W, bs, seq, opts_.nheads, opts_.head_dim);
  const std::size_t esz = dtype_size(opts_.output_dtype);
  const std::size_t blk = static_cast<std::size_t>(d.rows * d.cols) * esz;
  const bool comm = path != Path::kGemmOnly, compute = path != Path::kCommOnly;
  const uint64_t e = ex.epoch();
  if (compute)
    weight_.prepare(opts_.input_dtype, weight, opts_.nheads * opts_.head_dim, opts_.hidden, false);
  kernels::GemmOut o;
  o.ldc = d.cols;
  o.dtype = opts_.output_dtype;
  o.bias = bias;
  // Columns [t·cols, (t+1)·cols) of y = input · weightᵀ + bias: the head group of rank t.
  auto produce = [&](int t) {
    if (compute) {
      o.c = ex.block(me, t);
      ops::parallel_gemm(c, weight_, input, opts_.hidden, d.rows, t * d.cols, (t + 1) * d.cols, o);
    }
    if (comm) shm::signal_set(ex.extra_signal(me, t), e);
  };
  // Source s's block [bs, seq/W, heads_loc·head_dim] into output [bs, heads_loc, seq, head_dim]
  // at sequence positions [s·seq/W, (s+1)·seq/W).
  const std::size_t run_bytes = static_cast<std::size_t>(d.head_dim) * esz;
  auto place = [&](int s, const char* from) {
    for (int64_t b = 0; b < d.bs; ++b)
      for (int64_t h = 0; h < d.heads_loc; ++h) {
        char* to = output + ((static_cast<std::size_t>(b * d.heads_loc + h) * d.seq) +
                             static_cast<std::size_t>(s) * d.s_loc) *
                                run_bytes;
        const char* src =
            from + static_cast<std::size_t>(b * d.s_loc) * d.cols * esz + h * run_bytes;
        for (int64_t t = 0; t < d.s_loc; ++t)
          std::memcpy(to + t * run_bytes, src + static_cast<std::size_t>(t) * d.cols * esz,
                      run_bytes);
      }
  };

  // With copy offload the host's blocks are transposed in by a comm stream while this thread
  // computes the next block; otherwise this thread alternates between the two. `copies` is
  // declared before the transfers' scope guard so that on an early exit the transfers are
  // abandoned first and the copy task (queued behind them on a single stream) then stops.
  const bool offload = comm && compute && c.config().copy_offload && L > 1;
  ops::Offload copies(c);
  if (comm && N > 1) start_remote(c, ex, blk, /*ready=*/e, /*polite=*/compute);
  ops::BlockExchange::RailScope rail(ex, comm && N > 1);
  if (offload)
    copies.start([&] {
      for (int i = 1; i <= W; ++i) {
        const int s = (r + W - i) % W;  // r-1, r-2, ..., then our own block
        if (c.node_of(s) != nid) continue;
        const int q = c.local_of(s);
        ex.wait_extra(q, r, e, c.deadline(), s, "block", copies.stop());
        place(s, ex.block(q, r));
      }
    });
  // Step i: produce the block for rank r+i, then take in the one rank r-i produced for us at its
  // own step i. Our own block comes last: peers need theirs first.
  for (int i = 1; i < W; ++i) {
    produce((r + i) % W);
    const int s = (r + W - i) % W;
    if (!comm || offload || c.node_of(s) != nid) continue;
    const int q = c.local_of(s);
    ex.wait_extra(q, r, e, c.deadline(), s, "block");
    place(s, ex.block(q, r));
  }
  produce(r);
  if (!comm) return;
  if (!offload) place(r, ex.block(me, r));
  // Blocks of other hosts as MPI delivers them.
  for (int i = 1; i < N; ++i) {
    const int n = (nid + i) % N;
    for (int q = 0; q < c.node_size_of(n); ++q) {
      const int s = c.world_rank_of(n, q);
      ex.wait_extra(me, W + s, e, c.deadline(), s, "received");
      place(s, ex.block(me, W + s));
    }
  }
  if (offload) copies.finish();
  if (N > 1) rail.finish();
  if (L > 1) ex.release_peers();
}

// ---- A2aTransposeGemm ----------------------------------------------------------------------

A2aTransposeGemmImpl::A2aTransposeGemmImpl(std::shared_ptr<ContextImpl> ctx,
                                           const A2aTransposeGemmOptions& o,
                                           const std::string& local_error)
    : ctx_(std::move(ctx)), opts_(o) {
  ContextImpl& c = *ctx_;
  check_create(c, kAtg, o.max_bs, o.max_seq, o.nheads, o.head_dim, o.input_dtype, o.output_dtype,
               o.n, o.nheads * o.head_dim, {"n", o.n}, local_error);
  const int W = c.world_size();
  const Dims d = dims(W, o.max_bs, o.max_seq, o.nheads, o.head_dim);
  const std::size_t esz = dtype_size(o.input_dtype);
  ex_.emplace(c, kAtg, static_cast<std::size_t>(d.rows * d.cols) * esz, 2 * W,
              std::array<const char*, 4>{"bs", "seq", "", ""}, /*probe_cma=*/false,
              c.num_nodes() > 1 ? 2 * W : W);
  comm::agree(c.comm(),
              [&] { a2a_.resize(static_cast<std::size_t>(d.rows) * o.nheads * o.head_dim * esz); });
  kernels::blas_set_threads(1);
}

void A2aTransposeGemmImpl::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                                   const void* bias, void* output, void* a2a_output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({bs, seq, 0, 0},
           check_forward(*ctx_, kAtg, bs, seq, opts_.max_bs, opts_.max_seq,
                         {{"input", input}, {"weight", weight}, {"output", output}}));
  if (bs * seq == 0) return;
  ex.guarded([&] {
    char* a2a = a2a_output != nullptr ? static_cast<char*>(a2a_output) : a2a_.data();
    run(Path::kFused, static_cast<const char*>(input), bs, seq, weight, bias,
        static_cast<char*>(output), a2a);
  });
}

void A2aTransposeGemmImpl::forward_comm_only(const void* input, int64_t bs, int64_t seq,
                                             void* a2a_output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({bs, seq, 0, 0},
           check_forward(*ctx_, kAtg, bs, seq, opts_.max_bs, opts_.max_seq, {{"input", input}}));
  if (bs * seq == 0) return;
  ex.guarded([&] {
    run(Path::kCommOnly, static_cast<const char*>(input), bs, seq, nullptr, nullptr, nullptr,
        a2a_.data());
    if (a2a_output != nullptr)
      std::memcpy(a2a_output, a2a_.data(),
                  static_cast<std::size_t>(bs * (seq / ctx_->world_size())) * opts_.nheads *
                      opts_.head_dim * dtype_size(opts_.input_dtype));
  });
}

void A2aTransposeGemmImpl::forward_gemm_only(int64_t bs, int64_t seq, const void* weight,
                                             const void* bias, void* output) {
  ex_->check_local(check_forward(*ctx_, kAtg, bs, seq, opts_.max_bs, opts_.max_seq,
                                 {{"weight", weight}, {"output", output}}));
  if (bs * seq == 0) return;
  run(Path::kGemmOnly, nullptr, bs, seq, weight, bias, static_cast<char*>(output), a2a_.data());
}

void A2aTransposeGemmImpl::run(Path path, const char* input, int64_t bs, int64_t seq,
                               const void* weight, const void* bias, char* output, char* a2a) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id(), r = c.world_rank();
  const Dims d = dims(W, bs, seq, opts_.nheads, opts_.head_dim);
  const int64_t K = opts_.nheads * opts_.head_dim;
  const std::size_t esz = dtype_size(opts_.input_dtype);
  const std::size_t run_bytes = static_cast<std::size_t>(d.head_dim) * esz;
  const std::size_t blk_row = static_cast<std::size_t>(d.cols) * esz, a2a_row = K * esz;
  const std::size_t blk = static_cast<std::size_t>(d.rows) * blk_row;
  const bool comm = path != Path::kGemmOnly, compute = path != Path::kCommOnly;
  const uint64_t e = ex.epoch();
  if (compute) weight_.prepare(opts_.input_dtype, weight, opts_.n, K, false);
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = bias;
  const std::size_t out_row = static_cast<std::size_t>(opts_.n) * dtype_size(opts_.output_dtype);

  // Rows [i0, i1) of what we send rank t: row i = (b, t') holds input[b][h][t·seq/W + t'][:]
  // for every local head h, i.e. the layout of a2a_output's column group, `ld` bytes apart.
  auto pack = [&](int t, int64_t i0, int64_t i1, char* to, std::size_t ld) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.s_loc, tl = i % d.s_loc;
      for (int64_t h = 0; h < d.heads_loc; ++h)
        std::memcpy(to + static_cast<std::size_t>(i) * ld + h * run_bytes,
                    input + (static_cast<std::size_t>(b * d.heads_loc + h) * d.seq +
                             static_cast<std::size_t>(t) * d.s_loc + tl) *
                                run_bytes,
                    run_bytes);
    }
  };
  // Rows [i0, i1) of source s's block into a2a's column group s.
  auto take = [&](int s, const char* from, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      std::memcpy(a2a + static_cast<std::size_t>(i) * a2a_row + s * blk_row, from + i * blk_row,
                  blk_row);
  };

  // Row tiles: each GEMM call packs the whole weight again (n x nheads·head_dim), so tiles stay
  // large (at least 256 rows, at most 4), and there is a single one when the weight is at least
  // as wide as a tile is tall (then the packs would cost more than the pipelining wins).
  int64_t tile = std::max<int64_t>(256, (d.rows + 3) / 4);
  if (opts_.n >= tile) tile = std::max<int64_t>(d.rows, 1);
  const int64_t tiles = (d.rows + tile - 1) / tile;

  // Across hosts: MPI moves whole blocks, so they are packed first and handed over at once.
  if (comm && N > 1) {
    for (int t = 0; t < W; ++t)
      if (c.node_of(t) != nid) pack(t, 0, d.rows, ex.block(me, t), blk_row);
    // The first GEMM tile needs every source's rows, so nothing overlaps with these transfers:
    // they run to completion on this thread.
    start_remote(c, ex, blk, /*ready=*/0, /*polite=*/false, /*now=*/true);
  }
  ops::BlockExchange::RailScope rail(ex, comm && N > 1);
  // Everything tile j of the exchanged rows needs: our packs for the host peers, our own rows,
  // the peers' tiles (and, at tile 0, the rows of other hosts). `stop`: see Offload.
  auto exchange_tile = [&](int64_t j, const std::atomic<bool>* stop) {
    const int64_t i0 = j * tile, i1 = std::min(d.rows, i0 + tile);
    for (int i = 1; i < L; ++i) {  // ring order, each published as it is packed
      const int t = c.world_rank_of(nid, (me + i) % L);
      pack(t, i0, i1, ex.block(me, t), blk_row);
      shm::signal_set(ex.extra_signal(me, t), ops::BlockExchange::progress_value(e, j + 1));
    }
    pack(r, i0, i1, a2a + r * blk_row, a2a_row);
    for (int i = 1; i < L; ++i) {
      const int q = (me + L - i) % L, s = c.world_rank_of(nid, q);
      ex.wait_extra(q, r, ops::BlockExchange::progress_value(e, j + 1), c.deadline(), s, "tile",
                    stop);
      take(s, ex.block(q, r), i0, i1);
    }
    if (j == 0)
      for (int i = 1; i < N; ++i) {
        const int n = (nid + i) % N;
        for (int q = 0; q < c.node_size_of(n); ++q) {
          const int s = c.world_rank_of(n, q);
          ex.wait_extra(me, W + s, e, c.deadline(), s, "received", stop);
          take(s, ex.block(me, W + s), 0, d.rows);
        }
      }
  };
  auto gemm_tile = [&](int64_t j) {
    const int64_t i0 = j * tile, i1 = std::min(d.rows, i0 + tile);
    o.c = output + static_cast<std::size_t>(i0) * out_row;
    ops::parallel_gemm(c, weight_, a2a + static_cast<std::size_t>(i0) * a2a_row, K, i1 - i0, 0,
                       opts_.n, o);
  };

  if (comm && compute && c.config().copy_offload && tiles > 1 && W > 1) {
    // Copy offload: a comm stream exchanges tile after tile, raising `ready`, while this thread
    // runs the GEMM of every tile that is ready.
    shm::Signal ready;
    constexpr uint64_t kFailed = ~uint64_t{0};
    ops::Offload copies(c);
    copies.start([&] {
      try {
        for (int64_t j = 0; j < tiles; ++j) {
          exchange_tile(j, copies.stop());
          shm::signal_set(ready, static_cast<uint64_t>(j + 1));
        }
      } catch (...) {
        shm::signal_set(ready, kFailed);
        throw;
      }
    });
    for (int64_t j = 0; j < tiles; ++j) {
      // No time limit here: every wait of the task has its own, and a failed task raises
      // `ready` to kFailed.
      shm::signal_wait(ready, static_cast<uint64_t>(j + 1),
                       std::chrono::steady_clock::time_point::max(), c.wait_policy());
      if (shm::signal_load(ready) == kFailed) {
        copies.finish();  // rethrows the copy task's error
        raise(Errc::kInternal, "{}: the copy stream failed at tile {} (rank {})", kAtg, j, r);
      }
      gemm_tile(j);
    }
    copies.finish();
  } else {
    for (int64_t j = 0; j < tiles; ++j) {
      if (comm) exchange_tile(j, nullptr);
      if (compute) gemm_tile(j);
    }
  }
  if (comm && N > 1) rail.finish();
}

}  // namespace detail

// ---- public wrappers -------------------------------------------------------------------------

namespace {
template <class Impl>
Impl& checked(const std::unique_ptr<Impl>& p, const char* op) {
  if (!p) raise(Errc::kInvalidUsage, "{}: use of a moved-from op", op);
  return *p;
}
}  // namespace

GemmA2aTranspose::GemmA2aTranspose(const Context& ctx, const GemmA2aTransposeOptions& options)
    : impl_(std::make_unique<detail::GemmA2aTransposeImpl>(ctx.impl(), options)) {}
GemmA2aTranspose::GemmA2aTranspose(GemmA2aTranspose&&) noexcept = default;
GemmA2aTranspose& GemmA2aTranspose::operator=(GemmA2aTranspose&&) noexcept = default;
GemmA2aTranspose::~GemmA2aTranspose() = default;
void GemmA2aTranspose::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                               const void* bias, void* output) {
  checked(impl_, detail::kGat).forward(input, bs, seq, weight, bias, output);
}
void GemmA2aTranspose::forward_gemm_only(const void* input, int64_t bs, int64_t seq,
                                         const void* weight, const void* bias) {
  checked(impl_, detail::kGat).forward_gemm_only(input, bs, seq, weight, bias);
}
void GemmA2aTranspose::forward_comm_only(int64_t bs, int64_t seq, void* output) {
  checked(impl_, detail::kGat).forward_comm_only(bs, seq, output);
}
const GemmA2aTransposeOptions& GemmA2aTranspose::options() const {
  return checked(impl_, detail::kGat).options();
}

A2aTransposeGemm::A2aTransposeGemm(const Context& ctx, const A2aTransposeGemmOptions& options)
    : impl_(std::make_unique<detail::A2aTransposeGemmImpl>(ctx.impl(), options)) {}
A2aTransposeGemm::A2aTransposeGemm(A2aTransposeGemm&&) noexcept = default;
A2aTransposeGemm& A2aTransposeGemm::operator=(A2aTransposeGemm&&) noexcept = default;
A2aTransposeGemm::~A2aTransposeGemm() = default;
void A2aTransposeGemm::forward(const void* input, int64_t bs, int64_t seq, const void* weight,
                               const void* bias, void* output, void* a2a_output) {
  checked(impl_, detail::kAtg).forward(input, bs, seq, weight, bias, output, a2a_output);
}
void A2aTransposeGemm::forward_comm_only(const void* input, int64_t bs, int64_t seq,
                                         void* a2a_output) {
  checked(impl_, detail::kAtg).forward_comm_only(input, bs, seq, a2a_output);
}
void A2aTransposeGemm::forward_gemm_only(int64_t bs, int64_t seq, const void* weight,
                                         const void* bias, void* output) {
  checked(impl_, detail::kAtg).forward_gemm_only(bs, seq, weight, bias, output);
}
const A2aTransposeGemmOptions& A2aTransposeGemm::options() const {
  return checked(impl_, detail::kAtg).options();
}

}  // namespace fluxcpp
