#include "ops/all_gather.hpp"

#include <cstring>
#include <vector>

#include <unistd.h>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "shm/cma.hpp"

namespace fluxcpp {
namespace detail {

namespace {

constexpr const char* kOp = "all_gather";
constexpr std::size_t kAlign = 4096;

std::size_t align_up(std::size_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

// Progress values carry the epoch in the high half and the number of chunks landed in the low
// half, so one monotonic counter serves every chunk of every call.
uint64_t progress_value(uint64_t epoch, uint64_t chunks) {
  return (epoch << 32) | chunks;
}

}  // namespace

// Segment layout (every rank, same size):
//   SyncBlock | Signal progress[num_nodes] | Signal done[node_size] | blocks[num_nodes] of slot_
// done[q]: node rank q finished its single-copy (cma) read of our input for that epoch.
// blocks[n] holds the block of this rank's rail peer on host n (its own block at n = node_id):
// node peers read it from there.
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
  // Settings the protocol depends on: every rank must use the same.
  comm::agree_value(comm, kOp, "FLUXCPP_CHUNK_KB", c.config().chunk_bytes / 1024);
  comm::agree_value(comm, kOp, "FLUXCPP_COPY_ENGINE", static_cast<int>(c.config().copy_engine));
  comm::agree_value(comm, kOp, "FLUXCPP_CMA_MIN_KB", c.config().cma_min_bytes / 1024);
  comm::agree(comm, [&] {
    if (c.num_nodes() > 1 && !c.uniform_nodes())
      raise(Errc::kInvalidUsage,
            "{}: hosts with different numbers of ranks are not supported yet ({} ranks on {} "
            "hosts)",
            kOp, c.world_size(), c.num_nodes());
  });

  const int W = c.world_size();
  max_shard_ = static_cast<std::size_t>(o.max_m / W) * o.k * dtype_size(o.dtype);
  comm::agree(comm, [&] {
    // MPI counts are int: one block crossing hosts must stay below 2 GiB.
    FLUXCPP_CHECK_ARG(c.num_nodes() == 1 || max_shard_ <= static_cast<std::size_t>(INT32_MAX),
                      "{}: a block of max_m/W={} rows x k={} is {} bytes; across hosts the limit "
                      "is 2 GiB",
                      kOp, o.max_m / W, o.k, max_shard_);
  });
  slot_ = align_up(max_shard_, kAlign);
  const int N = c.num_nodes();
  const int L = c.node_size();
  data_off_ = align_up(sizeof(ops::SyncBlock) + sizeof(shm::Signal) * (N + L), kAlign);
  // The blocks are needed when host peers read them or MPI moves them.
  std::size_t bytes = data_off_ + (L > 1 || N > 1 ? slot_ * N : 0);
  // Agreed world-wide: a host whose /dev/shm is full must not leave the other hosts waiting.
  comm::agree(comm, [&] { buf_ = shm::SymmetricBuffer(c, bytes, "ag"); });
  std::vector<ops::SyncBlock*> blocks;
  for (int i = 0; i < c.node_size(); ++i)
    blocks.push_back(static_cast<ops::SyncBlock*>(buf_.peer(i)));
  if (N > 1) rail_ = comm::UniqueComm(ContextImpl::dup_comm(c.rail_comm()));
  sync_ = ops::CallSync(&c, kOp, std::move(blocks), rail_.get(), {"m", "", "", ""});

  // Single-copy engine: cma must work between every pair of ranks of the host.
  if (L > 1 && c.config().copy_engine != CopyEngine::kShm) {
    shm::cma_allow_peers();
    auto* probe = static_cast<uint64_t*>(buf_.local()) + sizeof(ops::SyncBlock) / 8;
    *probe = 0x5EED0000ull + static_cast<uint64_t>(c.node_rank());
    std::vector<std::string> info = c.allgather(
        fmt::format("{} {}", static_cast<long>(getpid()), reinterpret_cast<uintptr_t>(probe)));
    bool ok = true;
    for (int q = 0; q < L; ++q) {
      long pid = 0;
      unsigned long long addr = 0;
      std::sscanf(info[q].c_str(), "%ld %llu", &pid, &addr);
      pids_.push_back(static_cast<pid_t>(pid));
      if (q != c.node_rank())
        ok = ok && shm::cma_probe(pid_t(pid), addr, 0x5EED0000ull + static_cast<uint64_t>(q));
    }
    int all_ok = ok ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, c.node_comm());
    *probe = 0;  // only now: every peer has read it (the allreduce is a barrier)
    cma_ok_ = all_ok != 0;
    comm::agree(comm, [&] {
      if (c.config().copy_engine == CopyEngine::kCma && !cma_ok_)
        raise(Errc::kSystem,
              "{}: FLUXCPP_COPY_ENGINE=cma but process_vm_readv between the ranks of host {} is "
              "not permitted (ptrace policy); use auto or shm",
              kOp, c.node_id());
    });
  }
}

AllGatherImpl::~AllGatherImpl() {
  if (poisoned_) new shm::SymmetricBuffer(std::move(buf_));  // deliberately never unmapped
}

char* AllGatherImpl::region(int local, int node) const {
  return static_cast<char*>(buf_.peer(local)) + data_off_ + slot_ * node;
}

shm::Signal& AllGatherImpl::progress(int local, int node) const {
  auto* base = static_cast<char*>(buf_.peer(local)) + sizeof(ops::SyncBlock);
  return reinterpret_cast<shm::Signal*>(base)[node];
}

shm::Signal& AllGatherImpl::done(int owner, int reader) const {
  auto* base = static_cast<char*>(buf_.peer(owner)) + sizeof(ops::SyncBlock);
  return reinterpret_cast<shm::Signal*>(base)[ctx_->num_nodes() + reader];
}

std::string AllGatherImpl::validate(const void* input, int64_t m, const void* output) const {
  const int W = ctx_->world_size();
  if (m < 0 || m > opts_.max_m)
    return fmt::format("{}: m={} must be in [0, max_m={}] (rank {})", kOp, m, opts_.max_m,
                       ctx_->world_rank());
  if (m % W != 0)
    return fmt::format("{}: m={} is not divisible by the world size {} (rank {})", kOp, m, W,
                       ctx_->world_rank());
  if (m > 0 && input == nullptr)
    return fmt::format("{}: input is NULL with m={} (rank {})", kOp, m, ctx_->world_rank());
  if (m > 0 && output == nullptr)
    return fmt::format("{}: output is NULL with m={} (rank {})", kOp, m, ctx_->world_rank());
  return {};
}

void AllGatherImpl::forward(const void* input, int64_t m, void* output) {
  if (broken_)
    raise(Errc::kInvalidUsage,
          "{}: the op failed earlier (timeout or MPI error) and must be destroyed", kOp);
  if (ctx_->closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", kOp);
  const uint64_t e = ++epoch_;
  try {
    sync_.exchange(e, {m, 0, 0, 0}, validate(input, m, output), reinterpret_cast<uintptr_t>(input));
    if (m == 0) return;
    run(static_cast<const char*>(input), m, static_cast<char*>(output));
  } catch (const Error& err) {
    if (err.code() != Errc::kInvalidArgument) broken_ = true;
    throw;
  } catch (...) {
    broken_ = true;
    throw;
  }
}

// Across hosts: on the comm stream, swap blocks with the rail peers over MPI. MPI only ever
// touches our segment — it sends the staged copy of our block and receives into the block slots —
// so a transfer abandoned on a timeout can never write into or read from the caller's memory.
void AllGatherImpl::start_rail(std::size_t shard) {
  ContextImpl& c = *ctx_;
  abort_.store(false);
  const uint64_t e = epoch_;
  const auto deadline = c.deadline();
  auto task = [this, shard, e, deadline] {
    ContextImpl& c = *ctx_;
    const int N = c.num_nodes(), me = c.node_id(), l = c.node_rank();
    std::vector<MPI_Request> reqs;
    std::vector<int> recv_node;
    try {
      for (int i = 1; i < N; ++i) {
        int n = (me + i) % N;
        MPI_Request r;
        comm::check_mpi(
            MPI_Irecv(region(l, n), static_cast<int>(shard), MPI_BYTE, n, 1, rail_.get(), &r),
            "MPI_Irecv");
        reqs.push_back(r);
        recv_node.push_back(n);
      }
      for (int i = 1; i < N; ++i) {
        int n = (me + N - i) % N;
        MPI_Request r;
        comm::check_mpi(
            MPI_Isend(region(l, me), static_cast<int>(shard), MPI_BYTE, n, 1, rail_.get(), &r),
            "MPI_Isend");
        reqs.push_back(r);
      }
      std::size_t pending = reqs.size();
      const std::size_t nrecv = recv_node.size();
      while (pending > 0) {
        int idx = MPI_UNDEFINED, flag = 0;
        comm::check_mpi(
            MPI_Testany(static_cast<int>(reqs.size()), reqs.data(), &idx, &flag, MPI_STATUS_IGNORE),
            "MPI_Testany");
        if (flag && idx != MPI_UNDEFINED) {
          --pending;
          if (static_cast<std::size_t>(idx) < nrecv)
            shm::signal_set(progress(l, recv_node[idx]), progress_value(e, 1));
          continue;
        }
        if (abort_.load()) raise(Errc::kInternal, "{}: rail transfer abandoned", kOp);
        if (std::chrono::steady_clock::now() >= deadline) {
          int missing = -1;
          for (std::size_t i = 0; i < nrecv; ++i)
            if (reqs[i] != MPI_REQUEST_NULL) missing = c.world_rank_of(recv_node[i], l);
          if (missing >= 0) ops::raise_timeout(c, kOp, missing, "MPI block receive", 1, 0);
          raise(Errc::kTimeout, "{}: timed out after {} s sending blocks to other hosts (rank {})",
                kOp, c.config().timeout_s, c.world_rank());
        }
        sched_yield();
      }
    } catch (...) {
      abort_.store(true);
      abandon(reqs, recv_node.size());
      throw;
    }
  };
  if (c.node_size() == 1) {
    // Alone on the host there is nothing to overlap with: drive MPI from this thread and save
    // the hand-off to the comm thread (microseconds when each rank has one core).
    rail_ticket_ = 0;
    task();
  } else {
    rail_ticket_ = c.comm_stream(0).enqueue(std::move(task));
  }
}

// Cancels what can be cancelled and gives the rest a grace period; whatever is still in flight
// after that may touch our segment at any time, so the segment is kept mapped for good.
void AllGatherImpl::abandon(std::vector<MPI_Request>& reqs, std::size_t nrecv) noexcept {
  for (std::size_t i = 0; i < nrecv; ++i)
    if (reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&reqs[i]);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int all_done = 0;
  while (!all_done && std::chrono::steady_clock::now() < until) {
    if (MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &all_done, MPI_STATUSES_IGNORE) !=
        MPI_SUCCESS)
      break;
    if (!all_done) sched_yield();
  }
  if (!all_done) {
    poisoned_ = true;
    for (MPI_Request& r : reqs)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }
}

void AllGatherImpl::finish_rail() {
  ContextImpl& c = *ctx_;
  if (rail_ticket_ == 0) return;  // ran inline
  // The task honours its own deadline; give it a little beyond ours to report first.
  auto deadline = c.deadline() + std::chrono::seconds(5);
  if (!c.comm_stream(0).wait(rail_ticket_, deadline))
    raise(Errc::kTimeout, "{}: comm stream did not finish (rank {})", kOp, c.world_rank());
}

void AllGatherImpl::run(const char* input, int64_t m, char* output) {
  ContextImpl& c = *ctx_;
  const int W = c.world_size(), L = c.node_size(), N = c.num_nodes();
  const int me = c.node_rank(), nid = c.node_id();
  const std::size_t shard = static_cast<std::size_t>(m / W) * opts_.k * dtype_size(opts_.dtype);
  const uint64_t e = epoch_;
  if (N > 1) {
    // MPI sends from our segment: stage the whole block first (host peers may read it too).
    std::memcpy(region(me, nid), input, shard);
    shm::signal_set(progress(me, nid), progress_value(e, num_chunks(shard)));
    start_rail(shard);
  }
  struct RailGuard {  // never leave the comm task running past this call
    AllGatherImpl* self;
    bool active;
    ~RailGuard() {
      if (active) {
        self->abort_.store(true);
        try {
          self->finish_rail();
        } catch (...) {
        }
      }
    }
  } guard{this, N > 1};

  const bool cma = L > 1 && cma_ok_ &&
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
    for (int i = 1; i < N; ++i) {
      int n = (nid + i) % N;
      for (int j = 0; j < L; ++j) {
        int q = (me + j) % L;
        wait_block(q, n, progress_value(e, 1), deadline, "rail");
        std::memcpy(output + shard * c.world_rank_of(n, q), region(q, n), shard);
      }
    }
    guard.active = false;
    finish_rail();
  }
}

uint64_t AllGatherImpl::num_chunks(std::size_t shard) const {
  const std::size_t chunk = static_cast<std::size_t>(ctx_->config().chunk_bytes);
  return (shard + chunk - 1) / chunk;
}

void AllGatherImpl::wait_block(int q, int node, uint64_t want,
                               std::chrono::steady_clock::time_point deadline, const char* what) {
  ContextImpl& c = *ctx_;
  uint64_t observed = 0;
  if (!shm::signal_wait(progress(q, node), want, deadline, c.wait_policy(), &observed, &abort_)) {
    if (abort_.load()) finish_rail();  // rethrows the comm stream's error
    const int me = c.node_rank(), nid = c.node_id();
    int peer = q == me && node != nid ? c.world_rank_of(node, me) : c.world_rank_of(node, q);
    ops::raise_timeout(c, kOp, peer, fmt::format("{}-progress[{}] of local rank {}", what, node, q),
                       want, observed);
  }
}

// Within the host, staged: publish our block chunk by chunk into our segment and pull each
// peer's chunk right after it lands, so reads hit blocks that are still in the shared cache.
void AllGatherImpl::gather_shm(const char* input, std::size_t shard, char* output, bool prestaged) {
  ContextImpl& c = *ctx_;
  const int L = c.node_size(), me = c.node_rank(), nid = c.node_id();
  const uint64_t e = epoch_;
  char* own_out = output + shard * c.world_rank();
  if (L == 1) {
    if (input != own_out) std::memcpy(own_out, input, shard);
    return;
  }
  const auto deadline = c.deadline();
  const std::size_t chunk = static_cast<std::size_t>(c.config().chunk_bytes);
  const uint64_t nchunks = num_chunks(shard);
  char* mine = region(me, nid);
  auto pull = [&](uint64_t ch) {
    std::size_t off = ch * chunk, len = std::min(chunk, shard - off);
    for (int i = 1; i < L; ++i) {
      int q = (me + i) % L;
      wait_block(q, nid, progress_value(e, ch + 1), deadline, "block");
      std::memcpy(output + shard * c.world_rank_of(nid, q) + off, region(q, nid) + off, len);
    }
  };
  for (uint64_t ch = 0; ch < nchunks; ++ch) {
    std::size_t off = ch * chunk, len = std::min(chunk, shard - off);
    if (!prestaged) {
      std::memcpy(mine + off, input + off, len);
      shm::signal_set(progress(me, nid), progress_value(e, ch + 1));
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
  const int L = c.node_size(), me = c.node_rank(), nid = c.node_id();
  const uint64_t e = epoch_;
  char* own_out = output + shard * c.world_rank();
  if (input != own_out) std::memcpy(own_out, input, shard);
  std::exception_ptr failed;
  for (int i = 1; i < L; ++i) {
    int q = (me + i) % L;
    try {
      if (!failed)
        shm::cma_read(pids_[q], sync_.extra(q, e), output + shard * c.world_rank_of(nid, q), shard);
    } catch (...) {
      failed = std::current_exception();
    }
    // 2e: read; 2e+1: the read failed. Raised even on failure, so q never waits in vain and
    // learns that this call failed.
    shm::signal_set(done(q, me), 2 * e + (failed ? 1 : 0));
  }
  const auto deadline = c.deadline();
  int failed_reader = -1;
  for (int i = 1; i < L; ++i) {
    int q = (me + L - i) % L;
    uint64_t observed = 0;
    if (!shm::signal_wait(done(me, q), 2 * e, deadline, c.wait_policy(), &observed))
      ops::raise_timeout(c, kOp, c.world_rank_of(nid, q), fmt::format("done[{}]", q), 2 * e,
                         observed);
    if (shm::signal_load(done(me, q)) & 1) failed_reader = c.world_rank_of(nid, q);
  }
  if (failed) std::rethrow_exception(failed);
  if (failed_reader >= 0)
    raise(Errc::kSystem, "{}: rank {} could not read this rank's input (rank {})", kOp,
          failed_reader, c.world_rank());
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
  return impl_->options();
}

}  // namespace fluxcpp
