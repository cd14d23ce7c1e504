#include "ops/all_gather.hpp"

#include <cstring>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "ops/op_checks.hpp"
#include "shm/cma.hpp"

namespace fluxcpp {
namespace detail {

namespace {
constexpr const char* kOp = "all_gather";
}  // namespace

AllGatherImpl::AllGatherImpl(std::shared_ptr<ContextImpl> ctx, const AllGatherOptions& o,
                             const std::string& local_error)
    : ctx_(std::move(ctx)), opts_(o) {
  ContextImpl& c = *ctx_;
  // close() is collective, so this local check gives the same answer on every rank.
  if (c.closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", kOp);
  MPI_Comm comm = c.comm();
  comm::agree(comm, [&] {
    if (!local_error.empty())
      raise(Errc::kInvalidArgument, "{}: {} (rank {})", kOp, local_error, c.world_rank());
    FLUXCPP_CHECK_ARG(dtype_valid(o.dtype), "{}: dtype={} is not a valid fluxcpp dtype", kOp,
                      static_cast<int>(o.dtype));
    FLUXCPP_CHECK_ARG(o.k >= 1, "{}: k={} must be >= 1", kOp, o.k);
    FLUXCPP_CHECK_ARG(o.max_m >= 0, "{}: max_m={} must be >= 0", kOp, o.max_m);
    FLUXCPP_CHECK_ARG(o.max_m <= (int64_t{1} << 40) / o.k, "{}: max_m={} x k={} is too large", kOp,
                      o.max_m, o.k);
  });
  comm::agree_value(comm, kOp, "max_m", o.max_m);
  comm::agree_value(comm, kOp, "k", o.k);
  comm::agree_value(comm, kOp, "dtype", static_cast<int>(o.dtype));
  const std::size_t max_shard =
      static_cast<std::size_t>(o.max_m / c.world_size()) * o.k * dtype_size(o.dtype);
  // Extra signals: done[q] for each host rank q, then one "withdrawn" epoch.
  ex_.emplace(c, kOp, max_shard, c.node_size() + 1, std::array<const char*, 4>{"m", "", "", ""},
              /*probe_cma=*/true);
}

std::string AllGatherImpl::validate(const void* input, int64_t m, const void* output) const {
  return ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"input", input}, {"output", output}});
}

void AllGatherImpl::forward(const void* input, int64_t m, void* output) {
  ops::BlockExchange& ex = *ex_;
  ex.begin({m, 0, 0, 0}, validate(input, m, output), reinterpret_cast<uintptr_t>(input));
  if (m == 0) return;
  ex.guarded([&] { run(static_cast<const char*>(input), m, static_cast<char*>(output)); });
}

void AllGatherImpl::run(const char* input, int64_t m, char* output) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id();
  const std::size_t shard = static_cast<std::size_t>(m / W) * opts_.k * dtype_size(opts_.dtype);
  if (N > 1) {
    // MPI sends from our segment: stage the whole block first (host peers may read it too).
    ex.stage(input, shard);
    ex.start_rail(shard);
  }
  ops::BlockExchange::RailScope rail(ex, N > 1);

  const bool cma = L > 1 && ex.cma_ok() &&
                   (c.config().copy_engine == CopyEngine::kCma ||
                    static_cast<long>(shard) >= c.config().cma_min_bytes);
  if (cma) {
    gather_cma(input, shard, output);
  } else {
    gather_shm(input, shard, output, N > 1);
  }

  if (N > 1) {
    // Blocks from other hosts: each rank of the host received its rail peers' blocks by MPI
    // into its segment; copy them all out.
    const auto deadline = c.deadline();
    const uint64_t whole = ex.num_chunks(shard);
    for (int i = 1; i < N; ++i) {
      int n = (nid + i) % N;
      for (int j = 0; j < L; ++j) {
        int q = (me + j) % L;
        ex.wait(q, n, whole, deadline, "rail");
        std::memcpy(output + shard * c.world_rank_of(n, q), ex.block(q, n), shard);
      }
    }
    rail.finish();
  }
}

// Within the host, staged: publish our block chunk by chunk into our segment and pull each
// peer's chunk right after it lands, so reads hit blocks that are still in the shared cache.
void AllGatherImpl::gather_shm(const char* input, std::size_t shard, char* output, bool prestaged) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int L = c.node_size(), me = c.node_rank(), nid = c.node_id();
  char* own_out = output + shard * c.world_rank();
  if (L == 1) {
    if (input != own_out) std::memcpy(own_out, input, shard);
    return;
  }
  const auto deadline = c.deadline();
  const std::size_t chunk = ex.chunk_bytes();
  const uint64_t nchunks = ex.num_chunks(shard);
  char* mine = ex.block(me, nid);
  auto pull = [&](uint64_t ch) {
    std::size_t off = ch * chunk, len = std::min(chunk, shard - off);
    for (int i = 1; i < L; ++i) {
      int q = (me + i) % L;
      ex.wait(q, nid, ch + 1, deadline, "block");
      std::memcpy(output + shard * c.world_rank_of(nid, q) + off, ex.block(q, nid) + off, len);
    }
  };
  for (uint64_t ch = 0; ch < nchunks; ++ch) {
    std::size_t off = ch * chunk, len = std::min(chunk, shard - off);
    if (!prestaged) {
      std::memcpy(mine + off, input + off, len);
      ex.publish(ch + 1);
    }
    if (input != own_out) std::memcpy(own_out + off, input + off, len);
    if (ch > 0) pull(ch - 1);
  }
  pull(nchunks - 1);
}

// Within the host, single copy: read each peer's input straight from its address space into
// our output (the peers published their input addresses with the call header), then wait until
// every peer has finished reading ours, since the caller may reuse input once we return.
void AllGatherImpl::gather_cma(const char* input, std::size_t shard, char* output) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int nid = c.node_id();
  char* own_out = output + shard * c.world_rank();
  if (input != own_out) std::memcpy(own_out, input, shard);
  ex.cma_pull(0, [&](int q) {
    shm::cma_read(ex.pid(q), ex.extra(q), output + shard * c.world_rank_of(nid, q), shard);
  });
}

}  // namespace detail

AllGather::AllGather(const Context& ctx, const AllGatherOptions& options)
    : impl_(std::make_unique<detail::AllGatherImpl>(ctx.impl(), options)) {}
AllGather::AllGather(AllGather&&) noexcept = default;
AllGather& AllGather::operator=(AllGather&&) noexcept = default;
AllGather::~AllGather() = default;

void AllGather::forward(const void* input, int64_t m, void* output) {
  if (!impl_) raise(Errc::kInvalidUsage, "all_gather: forward on a moved-from op");
  impl_->forward(input, m, output);
}

const AllGatherOptions& AllGather::options() const {
  if (!impl_) raise(Errc::kInvalidUsage, "all_gather: options() on a moved-from op");
  return impl_->options();
}

}  // namespace fluxcpp
