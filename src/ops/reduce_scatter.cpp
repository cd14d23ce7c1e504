#include "ops/reduce_scatter.hpp"

#include <cstring>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "kernels/reduce.hpp"
#include "ops/op_checks.hpp"

namespace fluxcpp {
namespace detail {

namespace {
constexpr const char* kOp = "reduce_scatter";
}  // namespace

ReduceScatterImpl::ReduceScatterImpl(std::shared_ptr<ContextImpl> ctx,
                                     const ReduceScatterOptions& o, const std::string& local_error)
    : ctx_(std::move(ctx)), opts_(o) {
  ContextImpl& c = *ctx_;
  if (c.closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", kOp);
  MPI_Comm comm = c.comm();
  comm::agree(comm, [&] {
    if (!local_error.empty())
      raise(Errc::kInvalidArgument, "{}: {} (rank {})", kOp, local_error, c.world_rank());
    FLUXCPP_CHECK_ARG(dtype_valid(o.dtype), "{}: dtype={} is not a valid fluxcpp dtype (rank {})",
                      kOp, static_cast<int>(o.dtype), c.world_rank());
    FLUXCPP_CHECK_ARG(o.n >= 1, "{}: n={} must be >= 1 (rank {})", kOp, o.n, c.world_rank());
    FLUXCPP_CHECK_ARG(o.max_m >= 0, "{}: max_m={} must be >= 0", kOp, o.max_m);
    FLUXCPP_CHECK_ARG(o.max_m <= (int64_t{1} << 40) / o.n, "{}: max_m={} x n={} is too large", kOp,
                      o.max_m, o.n);
  });
  comm::agree_value(comm, kOp, "max_m", o.max_m);
  comm::agree_value(comm, kOp, "n", o.n);
  comm::agree_value(comm, kOp, "dtype", static_cast<int>(o.dtype));
  acc_ = o.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const int W = c.world_size(), N = c.num_nodes();
  const std::size_t elems = static_cast<std::size_t>(o.max_m / W) * o.n;
  const std::size_t slot = elems * std::max(dtype_size(o.dtype), dtype_size(acc_));
  ex_.emplace(c, kOp, slot, 0, std::array<const char*, 4>{"m", "", "", ""}, /*probe_cma=*/false,
              W + 2 * N);
  if (N > 1) host_sum_.resize(elems * dtype_size(acc_));
}

std::string ReduceScatterImpl::validate(const void* input, int64_t m, const void* output) const {
  return ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"input", input}, {"output", output}});
}

void ReduceScatterImpl::forward(const void* input, int64_t m, void* output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, output));
  if (m == 0) return;
  ex.guarded([&] { run(static_cast<const char*>(input), m, static_cast<char*>(output)); });
}

void ReduceScatterImpl::run(const char* input, int64_t m, char* output) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size();
  const int me = c.node_rank(), nid = c.node_id(), r = c.world_rank();
  const int64_t rows = m / W, count = rows * opts_.n;
  const std::size_t blk = static_cast<std::size_t>(count) * dtype_size(opts_.dtype);
  const uint64_t e = ex.epoch();
  const ops::Deadline deadline = c.deadline();
  auto in_block = [&](int t) { return input + blk * t; };

  // 1. Stage the row blocks a host peer will reduce: block t goes to rank t if it is on this
  // host, else to the host rank with t's local rank (it sums this host's share and sends it).
  for (int t = 0; t < W; ++t) {
    // Either way the reducer is the host rank with t's local rank.
    if (t == r || c.local_of(t) == me) continue;
    std::memcpy(ex.block(me, t), in_block(t), blk);
    shm::signal_set(ex.progress(me, t), ops::BlockExchange::progress_value(e, 1));
  }

  // Our own share is read from input directly.
  auto share = [&](int q, int t) -> const void* {
    if (q == me) return in_block(t);
    ex.wait(q, t, 1, deadline, "block", c.world_rank_of(nid, q));
    return ex.block(q, t);
  };
  reduce_row_blocks(c, ex, opts_.dtype, acc_, opts_.dtype, count, share, host_sum_.data(), output);
}

int host_sum_order(int me, int L, int i) {
  // me-1, me-2, ..., me+1, then me: the order in which ring-ordered producers (GemmRS computes
  // the block for rank r+i at its step i, its own last) finish the shares of our block.
  return i < L - 1 ? (me + L - 1 - i) % L : me;
}

void reduce_row_blocks(ContextImpl& c, ops::BlockExchange& ex, DType share_dtype, DType acc,
                       DType out_dtype, int64_t count,
                       const std::function<const void*(int q, int t)>& share, void* host_sum,
                       void* output) {
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id(), r = c.world_rank();
  const std::size_t acc_blk = static_cast<std::size_t>(count) * dtype_size(acc);
  const ops::Deadline deadline = c.deadline();
  auto host_shares = [&](int t) {
    std::vector<const void*> srcs(L);
    for (int q = 0; q < L; ++q) srcs[q] = share(host_sum_order(me, L, q), t);
    return srcs;
  };

  // Across hosts: this host's sum for each rank with our local rank elsewhere, kept in the
  // accumulation dtype, then swapped with those ranks over MPI.
  if (N > 1) {
    std::vector<int> send(N), recv(N);
    for (int n = 0; n < N; ++n) {
      send[n] = W + n;
      recv[n] = W + N + n;
      if (n == nid) continue;
      std::vector<const void*> srcs = host_shares(c.world_rank_of(n, me));
      kernels::reduce_sum(share_dtype, srcs.data(), L, acc, ex.block(me, W + n), count);
    }
    ex.start_rail(acc_blk, std::move(send), std::move(recv), /*polite=*/false);
  }
  ops::BlockExchange::RailScope rail(ex, N > 1);

  // Our own block: the host's sum, then (across hosts) the hosts' sums in host order.
  std::vector<const void*> srcs = host_shares(r);
  if (N == 1) {
    kernels::reduce_sum(share_dtype, srcs.data(), L, out_dtype, output, count);
    return;
  }
  kernels::reduce_sum(share_dtype, srcs.data(), L, acc, host_sum, count);
  std::vector<const void*> hosts(N);
  const uint64_t whole = ex.num_chunks(acc_blk);
  for (int n = 0; n < N; ++n) {
    if (n == nid) {
      hosts[n] = host_sum;
    } else {
      ex.wait(me, W + N + n, whole, deadline, "host-sum", c.world_rank_of(n, me));
      hosts[n] = ex.block(me, W + N + n);
    }
  }
  kernels::reduce_sum(acc, hosts.data(), N, out_dtype, output, count);
  rail.finish();
}

}  // namespace detail

ReduceScatter::ReduceScatter(const Context& ctx, const ReduceScatterOptions& options)
    : impl_(std::make_unique<detail::ReduceScatterImpl>(ctx.impl(), options)) {}
ReduceScatter::ReduceScatter(ReduceScatter&&) noexcept = default;
ReduceScatter& ReduceScatter::operator=(ReduceScatter&&) noexcept = default;
ReduceScatter::~ReduceScatter() = default;

void ReduceScatter::forward(const void* input, int64_t m, void* output) {
  if (!impl_) raise(Errc::kInvalidUsage, "reduce_scatter: forward on a moved-from op");
  impl_->forward(input, m, output);
}

const ReduceScatterOptions& ReduceScatter::options() const {
  if (!impl_) raise(Errc::kInvalidUsage, "reduce_scatter: options() on a moved-from op");
  return impl_->options();
}

}  // namespace fluxcpp
