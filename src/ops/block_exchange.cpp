#include "ops/block_exchange.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"
#include "shm/cma.hpp"

namespace fluxcpp::ops {

namespace {

constexpr std::size_t kAlign = 4096;

std::size_t align_up(std::size_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

}  // namespace

BlockExchange::BlockExchange(detail::ContextImpl& c, const char* op, std::size_t max_block_bytes,
                             int extra_signals, std::array<const char*, kSyncFields> field_names,
                             bool probe_cma, int slots, bool always_slots,
                             std::size_t scratch_bytes)
    : ctx_(&c), op_(op), slots_(slots > 0 ? slots : c.num_nodes()), extra_(extra_signals) {
  MPI_Comm comm = c.comm();
  // Settings the protocol depends on: every rank must use the same.
  comm::agree_value(comm, op, "FLUXCPP_CHUNK_KB", c.config().chunk_bytes / 1024);
  comm::agree_value(comm, op, "FLUXCPP_COPY_ENGINE", static_cast<int>(c.config().copy_engine));
  comm::agree_value(comm, op, "FLUXCPP_CMA_MIN_KB", c.config().cma_min_bytes / 1024);
  const int N = c.num_nodes(), L = c.node_size();
  comm::agree(comm, [&] {
    if (N > 1 && !c.uniform_nodes())
      raise(Errc::kInvalidUsage,
            "{}: hosts with different numbers of ranks are not supported yet ({} ranks on {} "
            "hosts)",
            op, c.world_size(), N);
    // MPI counts are int: one block crossing hosts must stay below 2 GiB.
    FLUXCPP_CHECK_ARG(N == 1 || max_block_bytes <= static_cast<std::size_t>(INT32_MAX),
                      "{}: one rank's block is {} bytes at max_m; across hosts the limit is 2 GiB",
                      op, max_block_bytes);
  });

  slot_ = align_up(max_block_bytes, kAlign);
  scratch_off_ = sizeof(SyncBlock) + sizeof(shm::Signal) * (slots_ + extra_signals + L);
  data_off_ = align_up(scratch_off_ + scratch_bytes, kAlign);
  // The blocks are needed when host peers read them or MPI moves them.
  const std::size_t bytes = data_off_ + (L > 1 || N > 1 || always_slots ? slot_ * slots_ : 0);
  // Agreed world-wide: a host whose /dev/shm is full must not leave the other hosts waiting.
  comm::agree(comm, [&] { buf_ = shm::SymmetricBuffer(c, bytes, op); });
  std::vector<SyncBlock*> blocks;
  for (int i = 0; i < L; ++i) blocks.push_back(static_cast<SyncBlock*>(buf_.peer(i)));
  if (N > 1) {
    rail_ = comm::UniqueComm(detail::ContextImpl::dup_comm(c.rail_comm()));
    world_ = comm::UniqueComm(detail::ContextImpl::dup_comm(comm));
  }
  sync_ = CallSync(&c, op, std::move(blocks), rail_.get(), field_names);

  // Single-copy reads: process_vm_readv must work between every pair of ranks of the host. Each
  // rank reads a word a peer wrote into its segment, through the peer's own address space.
  if (probe_cma && L > 1 && c.config().copy_engine != CopyEngine::kShm) {
    shm::cma_allow_peers();
    auto* probe = reinterpret_cast<uint64_t*>(signals(c.node_rank()));
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
              op, c.node_id());
    });
  }
}

BlockExchange::~BlockExchange() {
  // A rail task that outlived its call (its finish timed out) still uses this object: give it a
  // bounded wait; if it is still running, leak everything it can touch rather than free it.
  if (rail_ticket_ != 0 && ctx_ != nullptr && ctx_->num_comm_streams() > 0) {
    abort_.store(true);
    comm::Stream& s = ctx_->comm_stream(0);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    try {
      if (!s.wait(rail_ticket_, until)) {
        poisoned_ = true;
        new comm::UniqueComm(std::move(rail_));
        new comm::UniqueComm(std::move(world_));
        new std::atomic<bool>(true);
      }
    } catch (...) {
    }
  }
  if (poisoned_) new shm::SymmetricBuffer(std::move(buf_));  // deliberately never unmapped
  if (poisoned_ || leak_world_) new comm::UniqueComm(std::move(world_));  // never freed
}

void BlockExchange::check_usable() const {
  if (broken_)
    raise(Errc::kInvalidUsage,
          "{}: the op failed earlier (timeout, MPI or system error) and must be destroyed", op_);
  if (ctx_->closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", op_);
}

void BlockExchange::check_local(const std::string& local_error) const {
  check_usable();
  if (!local_error.empty()) throw Error(Errc::kInvalidArgument, local_error);
}

uint64_t BlockExchange::begin(const SyncFields& fields, const std::string& local_error,
                              uint64_t extra) {
  check_usable();
  const uint64_t e = ++epoch_;
  try {
    sync_.exchange(e, fields, local_error, extra);
  } catch (const Error& err) {
    if (err.code() != Errc::kInvalidArgument) broken_ = true;
    throw;
  } catch (...) {
    broken_ = true;
    throw;
  }
  return e;
}

void BlockExchange::release_peers() {
  const int L = ctx_->node_size(), me = ctx_->node_rank();
  for (int q = 0; q < L; ++q)
    if (q != me) shm::signal_set(signals(q)[slots_ + extra_ + me], epoch_);
  released_epoch_ = epoch_;
}

void BlockExchange::wait_released() {
  detail::ContextImpl& c = *ctx_;
  const int L = c.node_size(), me = c.node_rank();
  const Deadline deadline = c.deadline();
  for (int q = 0; q < L; ++q) {
    if (q == me) continue;
    uint64_t observed = 0;
    if (!shm::signal_wait(signals(me)[slots_ + extra_ + q], released_epoch_, deadline,
                          c.wait_policy(), &observed))
      raise_timeout(c, op_, c.world_rank_of(c.node_id(), q), fmt::format("released[{}]", q),
                    released_epoch_, observed);
  }
}

void BlockExchange::wait_extra(int owner, int index, uint64_t value, Deadline deadline, int peer,
                               const char* what, const std::atomic<bool>* stop) {
  detail::ContextImpl& c = *ctx_;
  uint64_t observed = 0;
  if (shm::signal_wait(extra_signal(owner, index), value, deadline, c.wait_policy(), &observed,
                       stop != nullptr ? stop : &abort_))
    return;
  if (stop != nullptr && stop->load()) raise(Errc::kInternal, "{}: copy task abandoned", op_);
  if (abort_.load()) finish_rail();  // rethrows the comm stream's error
  raise_timeout(c, op_, peer, fmt::format("{}[{}]", what, index % c.world_size()), value, observed);
}

void BlockExchange::stage_chunks(const char* input, std::size_t bytes) {
  char* mine = block(ctx_->node_rank(), ctx_->node_id());
  const uint64_t n = std::max<uint64_t>(num_chunks(bytes), 1);
  for (uint64_t ch = 0; ch < n; ++ch) {
    const std::size_t off = ch * chunk_bytes(), len = std::min(chunk_bytes(), bytes - off);
    std::memcpy(mine + off, input + off, len);
    publish(ch + 1);
  }
}

void BlockExchange::stage(const char* input, std::size_t bytes) {
  const int me = ctx_->node_rank(), nid = ctx_->node_id();
  std::memcpy(block(me, nid), input, bytes);
  publish(num_chunks(bytes));
}

uint64_t BlockExchange::wait(int q, int node, uint64_t chunks, Deadline deadline, const char* what,
                             int owner, const std::atomic<bool>* stop) {
  detail::ContextImpl& c = *ctx_;
  shm::Signal& s = progress(q, node);
  const uint64_t want = progress_value(epoch_, chunks);
  uint64_t observed = 0;
  if (!shm::signal_wait(s, want, deadline, c.wait_policy(), &observed,
                        stop != nullptr ? stop : &abort_)) {
    if (stop != nullptr && stop->load()) raise(Errc::kInternal, "{}: copy task abandoned", op_);
    if (abort_.load()) finish_rail();  // rethrows the comm stream's error
    const int me = c.node_rank(), nid = c.node_id();
    // Our own slot for another host is filled by that host's rail peer.
    int peer = owner >= 0               ? owner
               : q == me && node != nid ? c.world_rank_of(node, me)
                                        : c.world_rank_of(node, q);
    raise_timeout(c, op_, peer, fmt::format("{}-progress[{}] of local rank {}", what, node, q),
                  want, observed);
  }
  const uint64_t v = shm::signal_load(s);
  return (v >> 32) == epoch_ ? (v & 0xffffffffu) : chunks;
}

// MPI only ever touches our segment — it sends the staged copy of our block and receives into
// the block slots — so a transfer abandoned on a timeout can never write into or read from the
// caller's memory.
void BlockExchange::start_rail(std::size_t bytes, bool polite, bool staged_later) {
  const int N = ctx_->num_nodes();
  std::vector<int> send(N, ctx_->node_id()), recv(N);
  for (int n = 0; n < N; ++n) recv[n] = n;
  start_rail(bytes, std::move(send), std::move(recv), polite, staged_later);
}

void BlockExchange::start_rail(std::size_t bytes, std::vector<int> send_slot,
                               std::vector<int> recv_slot, bool polite, bool staged_later) {
  const int N = ctx_->num_nodes(), me = ctx_->node_id(), l = ctx_->node_rank();
  const uint64_t whole = progress_value(epoch_, std::max<uint64_t>(num_chunks(bytes), 1));
  std::vector<Transfer> t;
  for (int i = 1; i < N; ++i) {  // receives from the next hosts, sends to the previous ones
    const int n = (me + i) % N;
    t.push_back({false, ctx_->world_rank_of(n, l), block(l, recv_slot[n]), bytes,
                 &progress(l, recv_slot[n]), whole});
  }
  for (int i = 1; i < N; ++i) {
    const int n = (me + N - i) % N;
    t.push_back({true, ctx_->world_rank_of(n, l), block(l, send_slot[n]), bytes,
                 staged_later ? &progress(l, send_slot[n]) : nullptr, staged_later ? whole : 0});
  }
  start_transfers(std::move(t), polite);
}

void BlockExchange::start_transfers(std::vector<Transfer> transfers, bool polite, bool now) {
  detail::ContextImpl& c = *ctx_;
  abort_.store(false);
  const Deadline deadline = c.deadline();
  for (const Transfer& t : transfers)
    if (!t.send && t.bytes == 0 && t.signal != nullptr) shm::signal_set(*t.signal, t.value);
  transfers.erase(std::remove_if(transfers.begin(), transfers.end(),
                                 [](const Transfer& t) { return t.bytes == 0; }),
                  transfers.end());
  for (const Transfer& t : transfers)
    if (t.bytes > static_cast<std::size_t>(INT32_MAX))
      raise(Errc::kInvalidArgument, "{}: a transfer of {} bytes to rank {} exceeds MPI's 2 GiB",
            op_, t.bytes, t.peer);
  bool deferred = false;
  for (const Transfer& t : transfers) deferred = deferred || (t.send && t.signal != nullptr);
  const bool inline_run = (now || c.node_size() == 1) && !deferred;
  // Run inline, the caller has nothing else to do: poll flat out.
  polite = polite && !inline_run;
  auto task = [this, deadline, polite, transfers = std::move(transfers)] {
    detail::ContextImpl& c = *ctx_;
    // Receives are posted first and occupy reqs[0, nrecv); sends follow as they are posted.
    std::vector<MPI_Request> reqs;
    std::vector<const Transfer*> recvs, waiting;
    std::size_t nrecv = 0;
    try {
      for (const Transfer& t : transfers) {
        if (t.send) {
          waiting.push_back(&t);
          continue;
        }
        MPI_Request r;
        comm::check_mpi(
            MPI_Irecv(t.buf, static_cast<int>(t.bytes), MPI_BYTE, t.peer, 1, world_.get(), &r),
            "MPI_Irecv");
        reqs.push_back(r);
        recvs.push_back(&t);
      }
      nrecv = reqs.size();
      std::size_t pending = reqs.size() + waiting.size();
      // MPI progresses only inside MPI calls, but polling flat out would steal the core from a
      // GEMM this transfer is meant to overlap. Polite polling yields for 100 us, then backs off
      // to sleeps of up to 256 us, and starts over after every completion.
      int idle = 0;
      auto idle_since = std::chrono::steady_clock::now();
      auto progressed = [&] {
        idle = 0;
        idle_since = std::chrono::steady_clock::now();
      };
      while (pending > 0) {
        for (auto it = waiting.begin(); it != waiting.end();) {
          const Transfer& t = **it;
          if (t.signal != nullptr && shm::signal_load(*t.signal) < t.value) {
            ++it;
            continue;
          }
          MPI_Request r;
          comm::check_mpi(
              MPI_Isend(t.buf, static_cast<int>(t.bytes), MPI_BYTE, t.peer, 1, world_.get(), &r),
              "MPI_Isend");
          reqs.push_back(r);
          it = waiting.erase(it);
          progressed();
        }
        int idx = MPI_UNDEFINED, flag = 0;
        if (!reqs.empty())
          comm::check_mpi(MPI_Testany(static_cast<int>(reqs.size()), reqs.data(), &idx, &flag,
                                      MPI_STATUS_IGNORE),
                          "MPI_Testany");
        if (flag && idx != MPI_UNDEFINED) {
          --pending;
          progressed();
          if (static_cast<std::size_t>(idx) < nrecv && recvs[idx]->signal != nullptr)
            shm::signal_set(*recvs[idx]->signal, recvs[idx]->value);
          continue;
        }
        if (abort_.load()) raise(Errc::kInternal, "{}: transfer abandoned", op_);
        if (std::chrono::steady_clock::now() >= deadline) {
          for (std::size_t i = 0; i < nrecv; ++i)
            if (reqs[i] != MPI_REQUEST_NULL)
              raise_timeout(c, op_, recvs[i]->peer, "MPI block receive", 1, 0);
          if (!waiting.empty())
            raise(Errc::kTimeout,
                  "{}: timed out after {} s: this rank never produced its block for rank {} "
                  "(rank {})",
                  op_, c.config().timeout_s, waiting.front()->peer, c.world_rank());
          raise(Errc::kTimeout, "{}: timed out after {} s sending blocks to other hosts (rank {})",
                op_, c.config().timeout_s, c.world_rank());
        }
        if (!polite ||
            std::chrono::steady_clock::now() - idle_since < std::chrono::microseconds(100)) {
          sched_yield();
        } else {
          const long us = 1L << std::min(8, idle++ / 8);
          timespec ts{0, us * 1000};
          nanosleep(&ts, nullptr);
        }
      }
    } catch (...) {
      abort_.store(true);
      abandon(reqs, nrecv);
      throw;
    }
  };
  if (inline_run) {
    // Alone on the host there is nothing to overlap with: drive MPI from this thread and save
    // the hand-off to the comm thread (microseconds when each rank has one core).
    rail_ticket_ = 0;
    task();
  } else {
    rail_ticket_ = c.comm_stream(0).enqueue(std::move(task));
  }
}

void BlockExchange::allgather(const void* mine, void* all, std::size_t bytes) {
  detail::ContextImpl& c = *ctx_;
  const Deadline deadline = c.deadline();
  // The buffers live on the heap: if a peer never arrives the request cannot be cancelled and
  // MPI may write into them later, so on a timeout they are deliberately leaked.
  auto send = std::make_unique<std::vector<char>>(static_cast<const char*>(mine),
                                                  static_cast<const char*>(mine) + bytes);
  auto recv = std::make_unique<std::vector<char>>(bytes * c.world_size());
  MPI_Request req;
  comm::check_mpi(MPI_Iallgather(send->data(), static_cast<int>(bytes), MPI_BYTE, recv->data(),
                                 static_cast<int>(bytes), MPI_BYTE, world_.get(), &req),
                  "MPI_Iallgather");
  for (int done = 0;;) {
    comm::check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      send.release();
      recv.release();
      leak_world_ = true;
      raise(Errc::kTimeout, "{}: timed out after {} s exchanging call arguments (rank {})", op_,
            c.config().timeout_s, c.world_rank());
    }
    sched_yield();
  }
  std::memcpy(all, recv->data(), recv->size());
}

void BlockExchange::cma_pull(int done_base, const std::function<void(int q)>& read) {
  detail::ContextImpl& c = *ctx_;
  const int L = c.node_size(), me = c.node_rank(), nid = c.node_id();
  const uint64_t e = epoch_;
  std::exception_ptr failed;
  for (int i = 1; i < L; ++i) {
    const int q = (me + i) % L;
    try {
      if (!failed) {
        read(q);
        // An owner that gave up waiting for us (timeout) may have let its caller reuse its
        // memory before our read: it withdraws the epoch first, so a read checked after it is
        // valid.
        if (shm::signal_load(extra_signal(q, done_base + L)) >= e)
          raise(Errc::kTimeout, "{}: rank {} withdrew its input before this rank read it (rank {})",
                op_, c.world_rank_of(nid, q), c.world_rank());
      }
    } catch (...) {
      failed = std::current_exception();
    }
    // 2e: read; 2e+1: the read failed. Raised even on failure, so q never waits in vain and
    // learns that this call failed.
    shm::signal_set(extra_signal(q, done_base + me), 2 * e + (failed ? 1 : 0));
  }
  const auto deadline = c.deadline();
  int failed_reader = -1;
  for (int i = 1; i < L; ++i) {
    const int q = (me + L - i) % L;
    uint64_t observed = 0;
    if (!shm::signal_wait(extra_signal(me, done_base + q), 2 * e, deadline, c.wait_policy(),
                          &observed)) {
      shm::signal_set(extra_signal(me, done_base + L), e);  // withdraw: see the reader's check
      raise_timeout(c, op_, c.world_rank_of(nid, q), fmt::format("done[{}]", q), 2 * e, observed);
    }
    if (shm::signal_load(extra_signal(me, done_base + q)) & 1)
      failed_reader = c.world_rank_of(nid, q);
  }
  if (failed) std::rethrow_exception(failed);
  if (failed_reader >= 0)
    raise(Errc::kSystem, "{}: rank {} could not read this rank's memory (rank {})", op_,
          failed_reader, c.world_rank());
}

// Cancels what can be cancelled and gives the rest a grace period; whatever is still in flight
// after that may touch our segment at any time, so the segment is kept mapped for good.
void BlockExchange::abandon(std::vector<MPI_Request>& reqs, std::size_t nrecv) noexcept {
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

void BlockExchange::finish_rail() {
  detail::ContextImpl& c = *ctx_;
  if (rail_ticket_ == 0) return;  // ran inline
  // The task honours its own deadline; give it a little beyond ours to report first.
  const Deadline deadline = c.deadline() + std::chrono::seconds(5);
  if (!c.comm_stream(0).wait(rail_ticket_, deadline))
    raise(Errc::kTimeout, "{}: comm stream did not finish (rank {})", op_, c.world_rank());
}

BlockExchange::RailScope::~RailScope() {
  if (!active_) return;
  ex_.abort_.store(true);
  try {
    ex_.finish_rail();
  } catch (...) {
  }
}

}  // namespace fluxcpp::ops
