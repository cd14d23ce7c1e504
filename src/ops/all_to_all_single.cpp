#include "ops/all_to_all_single.hpp"

#include <cstring>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "shm/cma.hpp"

namespace fluxcpp {
namespace detail {

namespace {
constexpr const char* kOp = "all_to_all_single";
}  // namespace

AllToAllSingleImpl::AllToAllSingleImpl(std::shared_ptr<ContextImpl> ctx,
                                       const AllToAllSingleOptions& o,
                                       const std::string& local_error)
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
    FLUXCPP_CHECK_ARG(o.max_rows >= 0, "{}: max_rows={} must be >= 0 (rank {})", kOp, o.max_rows,
                      c.world_rank());
    FLUXCPP_CHECK_ARG(o.max_rows <= (int64_t{1} << 40) / o.n, "{}: max_rows={} x n={} is too large",
                      kOp, o.max_rows, o.n);
  });
  comm::agree_value(comm, kOp, "max_rows", o.max_rows);
  comm::agree_value(comm, kOp, "n", o.n);
  comm::agree_value(comm, kOp, "dtype", static_cast<int>(o.dtype));
  row_ = static_cast<std::size_t>(o.n) * dtype_size(o.dtype);
  const int W = c.world_size(), L = c.node_size();
  ex_.emplace(c, kOp, static_cast<std::size_t>(o.max_rows) * row_, 2 * W + L + 1,
              std::array<const char*, 4>{"", "", "", ""}, /*probe_cma=*/true, /*slots=*/2,
              /*always_slots=*/false, sizeof(int64_t) * 4 * W);
}

std::string AllToAllSingleImpl::validate(const void* input, const int64_t* in_splits,
                                         const void* output, const int64_t* out_splits) const {
  const int W = ctx_->world_size(), r = ctx_->world_rank();
  const char* names[2] = {"input_splits", "output_splits"};
  const int64_t* splits[2] = {in_splits, out_splits};
  const void* bufs[2] = {input, output};
  const char* buf_names[2] = {"input", "output"};
  for (int i = 0; i < 2; ++i) {
    if (splits[i] == nullptr) return fmt::format("{}: {} is NULL (rank {})", kOp, names[i], r);
    int64_t sum = 0;
    for (int t = 0; t < W; ++t) {
      if (splits[i][t] < 0 || splits[i][t] > opts_.max_rows)
        return fmt::format("{}: {}[{}]={} must be in [0, max_rows={}] (rank {})", kOp, names[i], t,
                           splits[i][t], opts_.max_rows, r);
      sum += splits[i][t];
    }
    if (sum > opts_.max_rows)
      return fmt::format("{}: the {} add up to {} rows, more than max_rows={} (rank {})", kOp,
                         names[i], sum, opts_.max_rows, r);
    if (sum > 0 && bufs[i] == nullptr)
      return fmt::format("{}: {} is NULL with {} rows (rank {})", kOp, buf_names[i], sum, r);
  }
  return {};
}

std::vector<int64_t> AllToAllSingleImpl::agree_splits(const int64_t* in_splits,
                                                      const int64_t* out_splits) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), nid = c.node_id();
  const std::size_t per_rank = 2 * static_cast<std::size_t>(W);
  // all[q][0..W): rank q's input_splits, all[q][W..2W): its output_splits.
  std::vector<int64_t> all(per_rank * W);
  if (c.num_nodes() == 1) {
    // Published in the scratch area before the handshake, which proves every peer did so.
    const std::size_t parity = ex.epoch() & 1;
    for (int q = 0; q < L; ++q)
      std::memcpy(&all[per_rank * c.world_rank_of(nid, q)],
                  ex.scratch(q) + parity * per_rank * sizeof(int64_t), per_rank * sizeof(int64_t));
  } else {
    std::vector<int64_t> mine(per_rank);
    std::memcpy(mine.data(), in_splits, W * sizeof(int64_t));
    std::memcpy(mine.data() + W, out_splits, W * sizeof(int64_t));
    ex.allgather(mine.data(), all.data(), per_rank * sizeof(int64_t));
  }
  // Every rank checks every pair in the same order, so all of them report the same mismatch.
  std::vector<int64_t> S(static_cast<std::size_t>(W) * W);
  for (int s = 0; s < W; ++s)
    for (int t = 0; t < W; ++t) {
      const int64_t sent = all[per_rank * s + t], expected = all[per_rank * t + W + s];
      if (sent != expected)
        raise(Errc::kInvalidArgument,
              "{}: splits do not match: rank {} sends {} rows to rank {} (input_splits[{}]) but "
              "rank {} expects {} rows from rank {} (output_splits[{}]) (reported by rank {})",
              kOp, s, sent, t, t, t, expected, s, s, c.world_rank());
      S[static_cast<std::size_t>(s) * W + t] = sent;
    }
  return S;
}

void AllToAllSingleImpl::forward(const void* input, const int64_t* input_splits, void* output,
                                 const int64_t* output_splits) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  ex.check_usable();
  const int W = c.world_size();
  std::string err = validate(input, input_splits, output, output_splits);
  if (c.num_nodes() == 1) {
    // Publish this call's splits for the host peers (zeros when they are unusable: the
    // handshake fails the call anyway). The area of parity p was last read during call e-2,
    // which every peer finished before it published call e-1.
    auto* mine = reinterpret_cast<int64_t*>(ex.scratch(c.node_rank())) +
                 ((ex.epoch() + 1) & 1) * 2 * static_cast<std::size_t>(W);
    for (int t = 0; t < W; ++t) {
      mine[t] = err.empty() ? input_splits[t] : 0;
      mine[W + t] = err.empty() ? output_splits[t] : 0;
    }
  }
  ex.begin({0, 0, 0, 0}, err, reinterpret_cast<uintptr_t>(input));
  std::vector<int64_t> S;
  try {
    S = agree_splits(input_splits, output_splits);
  } catch (const Error& e) {
    if (e.code() != Errc::kInvalidArgument) ex.mark_broken();
    throw;
  }
  ex.guarded([&] { run(static_cast<const char*>(input), static_cast<char*>(output), S); });
}

void AllToAllSingleImpl::run(const char* input, char* output, const std::vector<int64_t>& S) {
  ContextImpl& c = *ctx_;
  ops::BlockExchange& ex = *ex_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id(), r = c.world_rank();
  const uint64_t e = ex.epoch();
  const ops::Deadline deadline = c.deadline();
  auto rows = [&](int s, int t) { return S[static_cast<std::size_t>(s) * W + t]; };
  // Row offset of rank s's block for rank t in s's input, and of s's rows in t's output.
  auto in_off = [&](int s, int t) {
    int64_t o = 0;
    for (int u = 0; u < t; ++u) o += rows(s, u);
    return static_cast<std::size_t>(o) * row_;
  };
  auto out_off = [&](int t, int s) {
    int64_t o = 0;
    for (int u = 0; u < s; ++u) o += rows(u, t);
    return static_cast<std::size_t>(o) * row_;
  };
  auto bytes = [&](int s, int t) { return static_cast<std::size_t>(rows(s, t)) * row_; };
  auto on_host = [&](int t) { return c.node_of(t) == nid; };

  // 1. Across hosts: stage the blocks for other hosts' ranks and hand them to MPI first (the
  // slowest path), receiving into slot 1 at the offsets of our output.
  std::vector<ops::BlockExchange::Transfer> xfers;
  if (N > 1) {
    for (int t = 0; t < W; ++t) {
      if (on_host(t)) continue;
      if (bytes(r, t) > 0)
        std::memcpy(ex.block(me, 0) + in_off(r, t), input + in_off(r, t), bytes(r, t));
      xfers.push_back({true, t, ex.block(me, 0) + in_off(r, t), bytes(r, t), nullptr, 0});
      xfers.push_back(
          {false, t, ex.block(me, 1) + out_off(r, t), bytes(t, r), &ex.extra_signal(me, W + t), e});
    }
    // Nothing here overlaps with it: run it to completion on this thread (no hand-off).
    ex.start_transfers(std::move(xfers), /*polite=*/false, /*now=*/true);
  }
  ops::BlockExchange::RailScope rail(ex, N > 1);

  // 2. Our own rows.
  if (bytes(r, r) > 0) std::memcpy(output + out_off(r, r), input + in_off(r, r), bytes(r, r));

  // 3. Within the host: single copy straight out of the peers' inputs when the blocks are large
  // (every rank decides from the same split matrix), else through the staged copies.
  if (L > 1) {
    std::size_t largest = 0;
    for (int s = 0; s < W; ++s)
      for (int t = 0; t < W; ++t)
        if (s != t && c.node_of(s) == c.node_of(t)) largest = std::max(largest, bytes(s, t));
    const CopyEngine engine = c.config().copy_engine;
    const bool cma =
        ex.cma_ok() && engine != CopyEngine::kShm &&
        (engine == CopyEngine::kCma || static_cast<long>(largest) >= c.config().cma_min_bytes);
    if (cma) {
      ex.cma_pull(2 * W, [&](int q) {
        const int s = c.world_rank_of(nid, q);
        if (bytes(s, r) > 0)
          shm::cma_read(ex.pid(q), ex.extra(q) + in_off(s, r), output + out_off(r, s), bytes(s, r));
      });
    } else {
      // Stage the blocks for host peers in ring order, each published as soon as it is copied;
      // read the peers' blocks in the matching order (peer r-i stages ours at its step i).
      for (int i = 1; i < L; ++i) {
        const int t = c.world_rank_of(nid, (me + i) % L);
        if (bytes(r, t) > 0)
          std::memcpy(ex.block(me, 0) + in_off(r, t), input + in_off(r, t), bytes(r, t));
        shm::signal_set(ex.extra_signal(me, t), e);
      }
      for (int i = 1; i < L; ++i) {
        const int q = (me + L - i) % L, s = c.world_rank_of(nid, q);
        ex.wait_extra(q, r, e, deadline, s, "staged");
        if (bytes(s, r) > 0)
          std::memcpy(output + out_off(r, s), ex.block(q, 0) + in_off(s, r), bytes(s, r));
      }
    }
  }

  // 4. Rows from other hosts, as they arrive.
  if (N > 1) {
    for (int i = 1; i < N; ++i) {
      const int n = (nid + i) % N;
      for (int q = 0; q < c.node_size_of(n); ++q) {
        const int s = c.world_rank_of(n, q);
        ex.wait_extra(me, W + s, e, deadline, s, "received");
        if (bytes(s, r) > 0)
          std::memcpy(output + out_off(r, s), ex.block(me, 1) + out_off(r, s), bytes(s, r));
      }
    }
    rail.finish();
  }
}

}  // namespace detail

AllToAllSingle::AllToAllSingle(const Context& ctx, const AllToAllSingleOptions& options)
    : impl_(std::make_unique<detail::AllToAllSingleImpl>(ctx.impl(), options)) {}
AllToAllSingle::AllToAllSingle(AllToAllSingle&&) noexcept = default;
AllToAllSingle& AllToAllSingle::operator=(AllToAllSingle&&) noexcept = default;
AllToAllSingle::~AllToAllSingle() = default;

void AllToAllSingle::forward(const void* input, const int64_t* input_splits, void* output,
                             const int64_t* output_splits) {
  if (!impl_) raise(Errc::kInvalidUsage, "all_to_all_single: forward on a moved-from op");
  impl_->forward(input, input_splits, output, output_splits);
}

const AllToAllSingleOptions& AllToAllSingle::options() const {
  if (!impl_) raise(Errc::kInvalidUsage, "all_to_all_single: options() on a moved-from op");
  return impl_->options();
}

}  // namespace fluxcpp
