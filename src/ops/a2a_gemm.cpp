#include "ops/a2a_gemm.hpp"

#include <cstring>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "ops/offload.hpp"
#include "ops/op_checks.hpp"
#include "ops/parallel_gemm.hpp"

namespace fluxcpp {
namespace detail {

namespace {
constexpr const char* kOp = "a2a_gemm";
}  // namespace

A2aGemmImpl::A2aGemmImpl(std::shared_ptr<ContextImpl> ctx, const A2aGemmOptions& o,
                         const std::string& local_error)
    : ctx_(std::move(ctx)), opts_(o) {
  ContextImpl& c = *ctx_;
  ops::check_gemm_create(
      c, kOp, {o.max_m, o.n, o.k, o.input_dtype, o.output_dtype, o.transpose_weight}, local_error);
  in_row_ = static_cast<std::size_t>(o.k) * dtype_size(o.input_dtype);
  out_row_ = static_cast<std::size_t>(o.n) * dtype_size(o.output_dtype);
  const int W = c.world_size();
  ex_.emplace(c, kOp, static_cast<std::size_t>(o.max_m) * in_row_, 2 * W,
              std::array<const char*, 4>{"m", "", "", ""}, /*probe_cma=*/false, /*slots=*/2);
  // The gather buffer is allocated here, agreed, so a failed allocation cannot strand the peers
  // of a forward.
  comm::agree(c.comm(), [&] { local_.resize(static_cast<std::size_t>(o.max_m) * in_row_); });
  // Our workers are the parallelism: each BLAS call runs on one thread (see docs/design.md).
  kernels::blas_set_threads(1);
}

std::string A2aGemmImpl::validate(const void* input, int64_t m, const void* weight,
                                  const void* output, Path path) const {
  if (path == Path::kCommOnly)
    return ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"input", input}});
  return ops::check_forward(*ctx_, kOp, m, opts_.max_m,
                            {{"input", input}, {"weight", weight}, {"output", output}});
}

void A2aGemmImpl::forward(const void* input, int64_t m, const void* weight, const void* bias,
                          void* output, void* a2a_output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, weight, output, Path::kFused));
  if (m == 0) return;
  ex.guarded([&] {
    run(Path::kFused, static_cast<const char*>(input), m, weight, bias, static_cast<char*>(output),
        static_cast<char*>(a2a_output));
  });
}

void A2aGemmImpl::forward_comm_only(const void* input, int64_t m, void* a2a_output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, nullptr, nullptr, Path::kCommOnly));
  if (m == 0) return;
  ex.guarded([&] {
    run(Path::kCommOnly, static_cast<const char*>(input), m, nullptr, nullptr, nullptr,
        static_cast<char*>(a2a_output));
  });
}

void A2aGemmImpl::forward_gemm_only(const void* input, int64_t m, const void* weight,
                                    const void* bias, void* output) {
  // Local: no handshake, no waits. Blocks of other ranks are whatever the buffers hold.
  ex_->check_local(validate(input, m, weight, output, Path::kGemmOnly));
  if (m == 0) return;
  run(Path::kGemmOnly, static_cast<const char*>(input), m, weight, bias, static_cast<char*>(output),
      nullptr);
}

void A2aGemmImpl::run(Path path, const char* input, int64_t m, const void* weight, const void* bias,
                      char* output, char* a2a) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id(), r = c.world_rank();
  const int64_t rows = m / W;
  const std::size_t blk = static_cast<std::size_t>(rows) * in_row_;
  const bool comm = path != Path::kGemmOnly, compute = path != Path::kCommOnly;
  const uint64_t e = ex.epoch();
  const ops::Deadline deadline = c.deadline();
  if (compute) weight_.prepare(opts_.input_dtype, weight, opts_.n, opts_.k, opts_.transpose_weight);
  kernels::GemmOut o;
  o.ldc = opts_.n;
  o.dtype = opts_.output_dtype;
  o.bias = bias;
  // Each BLAS call packs the whole weight (n x k) again, so computing block by block costs W
  // packs; when the weight is at least as wide as a block is tall, that costs more than the
  // overlap wins: the blocks are then gathered into one buffer and multiplied in one call.
  const bool gather = W > 1 && opts_.n >= rows;
  // Gather mode collects into our buffer, which gemm-only then reads (its own block refreshed
  // from `input`, the others as the last exchange left them).
  char* local = local_.data();
  // Block s of the result: the GEMM over the rows s sent us, and their copy into a2a_output.
  auto consume = [&](int s, const char* rows_from_s) {
    if (gather) {
      if (comm || s == r) std::memcpy(local + blk * s, rows_from_s, blk);
      return;
    }
    if (compute) {
      o.c = output + static_cast<std::size_t>(s) * rows * out_row_;
      ops::parallel_gemm(c, weight_, rows_from_s, opts_.k, rows, 0, opts_.n, o);
    }
    if (a2a != nullptr) std::memcpy(a2a + blk * s, rows_from_s, blk);
  };
  // 1. Publish: blocks for other hosts go to MPI first (the slowest path), then the blocks for
  // host peers are staged in ring order, each published as soon as it is copied.
  // With copy offload the staging runs on a comm stream while this thread computes our own
  // block; the MPI sends then wait for their block's staged signal.
  const bool offload = comm && compute && c.config().copy_offload && W > 1;
  auto stage = [&](int t) {
    std::memcpy(ex.block(me, 0) + blk * t, input + blk * t, blk);
    shm::signal_set(ex.extra_signal(me, t), e);
  };
  ops::Offload copies(c);
  if (offload)
    copies.start([&] {
      for (int i = 1; i < W; ++i)  // other hosts first: their path is the slowest
        if (c.node_of((r + i) % W) != nid) stage((r + i) % W);
      for (int i = 1; i < L; ++i) stage(c.world_rank_of(nid, (me + i) % L));
    });
  if (comm && N > 1) {
    std::vector<ops::BlockExchange::Transfer> xfers;
    for (int t = 0; t < W; ++t) {
      if (c.node_of(t) == nid) continue;
      if (!offload) stage(t);
      xfers.push_back({true, t, ex.block(me, 0) + blk * t, blk,
                       offload ? &ex.extra_signal(me, t) : nullptr, offload ? e : 0});
      xfers.push_back({false, t, ex.block(me, 1) + blk * t, blk, &ex.extra_signal(me, W + t), e});
    }
    ex.start_transfers(std::move(xfers), /*polite=*/compute);
  }
  ops::BlockExchange::RailScope rail(ex, comm && N > 1);
  if (comm && !offload)
    for (int i = 1; i < L; ++i) stage(c.world_rank_of(nid, (me + i) % L));

  // 2. Our own block needs nothing from anyone.
  consume(r, input + blk * r);
  // 3. Host peers in the matching ring order (peer r-i staged ours at its step i), each read in
  // place from the peer's segment once it has landed.
  for (int i = 1; i < L; ++i) {
    const int q = (me + L - i) % L, s = c.world_rank_of(nid, q);
    if (comm) ex.wait_extra(q, r, e, deadline, s, "staged");
    consume(s, ex.block(q, 0) + blk * r);
  }
  // 4. Other hosts' blocks as MPI delivers them.
  for (int i = 1; i < N; ++i) {
    const int n = (nid + i) % N;
    for (int q = 0; q < c.node_size_of(n); ++q) {
      const int s = c.world_rank_of(n, q);
      if (comm) ex.wait_extra(me, W + s, e, deadline, s, "received");
      consume(s, ex.block(me, 1) + blk * s);
    }
  }
  if (gather) {
    if (compute) {
      o.c = output;
      ops::parallel_gemm(c, weight_, local, opts_.k, m, 0, opts_.n, o);
    }
    if (a2a != nullptr && comm) std::memcpy(a2a, local, blk * W);
  }
  if (offload) copies.finish();
  if (comm && N > 1) rail.finish();
}

}  // namespace detail

A2aGemm::A2aGemm(const Context& ctx, const A2aGemmOptions& options)
    : impl_(std::make_unique<detail::A2aGemmImpl>(ctx.impl(), options)) {}
A2aGemm::A2aGemm(A2aGemm&&) noexcept = default;
A2aGemm& A2aGemm::operator=(A2aGemm&&) noexcept = default;
A2aGemm::~A2aGemm() = default;

namespace {
detail::A2aGemmImpl& checked(const std::unique_ptr<detail::A2aGemmImpl>& p) {
  if (!p) raise(Errc::kInvalidUsage, "a2a_gemm: use of a moved-from op");
  return *p;
}
}  // namespace

void A2aGemm::forward(const void* input, int64_t m, const void* weight, const void* bias,
                      void* output, void* a2a_output) {
  checked(impl_).forward(input, m, weight, bias, output, a2a_output);
}
void A2aGemm::forward_gemm_only(const void* input, int64_t m, const void* weight, const void* bias,
                                void* output) {
  checked(impl_).forward_gemm_only(input, m, weight, bias, output);
}
void A2aGemm::forward_comm_only(const void* input, int64_t m, void* a2a_output) {
  checked(impl_).forward_comm_only(input, m, a2a_output);
}
const A2aGemmOptions& A2aGemm::options() const {
  return checked(impl_).options();
}

}  // namespace fluxcpp
