#include "ops/call_sync.hpp"

#include <cstring>
#include <memory>
#include <vector>

#include "comm/mpi_util.hpp"
#include "error_util.hpp"

namespace fluxcpp::ops {

namespace {
enum : uint64_t { kOk = 1, kBadHere = 2, kBadElsewhere = 3 };
}

CallSync::CallSync(detail::ContextImpl* ctx, const char* op, std::vector<SyncBlock*> blocks,
                   MPI_Comm rail, std::array<const char*, kSyncFields> field_names)
    : ctx_(ctx), op_(op), blocks_(std::move(blocks)), rail_(rail), names_(field_names) {}

void raise_timeout(detail::ContextImpl& ctx, const char* op, int peer, const std::string& signal,
                   uint64_t expected, uint64_t observed) {
  raise(Errc::kTimeout,
        "{}: timed out after {} s waiting for rank {} (host {}, local rank {}) on {}: expected >= "
        "{}, observed {} (this is rank {})",
        op, ctx.config().timeout_s, peer, ctx.node_of(peer), ctx.local_of(peer), signal, expected,
        observed, ctx.world_rank());
}

void CallSync::exchange(uint64_t epoch, const SyncFields& fields, const std::string& local_error,
                        uint64_t extra) {
  const int me = ctx_->node_rank();
  const int parity = static_cast<int>(epoch & 1);
  uint64_t status = local_error.empty() ? kOk : kBadHere;
  std::string error = local_error;
  const auto deadline = ctx_->deadline();

  // Across hosts: the rail peers (same local rank on every host) swap descriptors first, so that
  // what a rank publishes on its host already covers its rail.
  if (rail_ != MPI_COMM_NULL) {
    int rail_size = 1, rail_rank = 0;
    MPI_Comm_size(rail_, &rail_size);
    MPI_Comm_rank(rail_, &rail_rank);
    // The buffers live on the heap: if a peer never arrives the request cannot be cancelled, and
    // MPI may still write into them later, so on a timeout they are deliberately leaked.
    constexpr int kLen = sizeof(SyncBlock::message[0]);
    struct Buffers {
      int64_t mine[kSyncFields + 1];
      std::vector<int64_t> all;
      char msg[kLen] = {};
      std::vector<char> texts;
    };
    auto bufs = std::make_unique<Buffers>();
    bufs->all.resize(static_cast<std::size_t>(rail_size) * (kSyncFields + 1));
    int64_t* mine = bufs->mine;
    std::vector<int64_t>& all = bufs->all;
    std::vector<char>& texts = bufs->texts;
    mine[0] = static_cast<int64_t>(status);
    std::memcpy(mine + 1, fields.data(), sizeof(int64_t) * kSyncFields);
    auto iallgather = [&](const void* send, void* recv, int count, MPI_Datatype type) {
      MPI_Request req;
      comm::check_mpi(MPI_Iallgather(send, count, type, recv, count, type, rail_, &req),
                      "MPI_Iallgather");
      int done = 0;
      for (;;) {
        comm::check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) return;
        if (std::chrono::steady_clock::now() >= deadline) {
          std::string peers;
          for (int n = 0; n < rail_size; ++n)
            if (n != rail_rank)
              peers += fmt::format("{}{}", peers.empty() ? "" : ", ", ctx_->world_rank_of(n, me));
          bufs.release();  // see above: MPI may still write here; the caller marks the op broken
          raise(Errc::kTimeout,
                "{}: timed out after {} s in the call handshake with rank(s) {} on other hosts "
                "(this is rank {})",
                op_, ctx_->config().timeout_s, peers, ctx_->world_rank());
        }
        sched_yield();
      }
    };
    iallgather(mine, all.data(), kSyncFields + 1, MPI_INT64_T);
    bool any_bad = false;
    for (int n = 0; n < rail_size; ++n)
      any_bad = any_bad ||
                all[static_cast<std::size_t>(n) * (kSyncFields + 1)] != static_cast<int64_t>(kOk);
    if (any_bad) {  // every rail rank sees the same statuses, so all of them take this branch
      std::snprintf(bufs->msg, kLen, "%s", local_error.c_str());
      texts.resize(static_cast<std::size_t>(kLen) * rail_size);
      iallgather(bufs->msg, texts.data(), kLen, MPI_CHAR);
    }
    for (int n = 0; n < rail_size && status == kOk; ++n) {
      const int64_t* d = &all[static_cast<std::size_t>(n) * (kSyncFields + 1)];
      int peer = ctx_->world_rank_of(n, me);
      if (d[0] != static_cast<int64_t>(kOk)) {
        status = kBadElsewhere;
        error =
            fmt::format("{} (reported by rank {})",
                        &texts[static_cast<std::size_t>(n) * sizeof(SyncBlock::message[0])], peer);
      }
      for (int f = 0; f < kSyncFields && status == kOk; ++f)
        if (d[1 + f] != fields[f]) {
          status = kBadElsewhere;
          error = fmt::format("{}: ranks disagree on {}: rank {} passed {}, rank {} passed {}", op_,
                              names_[f], ctx_->world_rank(), fields[f], peer, d[1 + f]);
        }
    }
  }

  // Publish ours: payload first, then the epoch (release).
  SyncBlock& own = *blocks_[me];
  shm::Signal& h = own.header[parity];
  h.payload[0] = status;
  for (int f = 0; f < kSyncFields; ++f) h.payload[1 + f] = static_cast<uint64_t>(fields[f]);
  h.payload[5] = extra;
  std::snprintf(own.message[parity], sizeof own.message[parity], "%s", error.c_str());
  shm::signal_set(h, epoch);

  // Read everyone's. Peers publish epoch e only after finishing e-1, and overwrite this parity
  // only at e+2, which needs our e+1 header: the payload is stable while we read it.
  const int n = static_cast<int>(blocks_.size());
  for (int i = 1; i < n; ++i) {
    int q = (me + i) % n;
    const shm::Signal& ph = blocks_[q]->header[parity];
    uint64_t observed = 0;
    if (!shm::signal_wait(ph, epoch, deadline, ctx_->wait_policy(), &observed))
      raise_timeout(*ctx_, op_, ctx_->world_rank_of(ctx_->node_id(), q),
                    fmt::format("call-header[{}]", parity), epoch, observed);
    if (status != kOk) continue;  // keep reading: every header must be consumed this epoch
    int peer = ctx_->world_rank_of(ctx_->node_id(), q);
    if (ph.payload[0] != kOk) {
      status = kBadElsewhere;
      error = ph.payload[0] == kBadHere
                  ? fmt::format("{} (reported by rank {})", blocks_[q]->message[parity], peer)
                  : std::string(blocks_[q]->message[parity]);
      continue;
    }
    for (int f = 0; f < kSyncFields && status == kOk; ++f)
      if (static_cast<int64_t>(ph.payload[1 + f]) != fields[f]) {
        status = kBadElsewhere;
        error = fmt::format("{}: ranks disagree on {}: rank {} passed {}, rank {} passed {}", op_,
                            names_[f], ctx_->world_rank(), fields[f], peer,
                            static_cast<int64_t>(ph.payload[1 + f]));
      }
  }
  if (status != kOk) throw Error(Errc::kInvalidArgument, error);
}

}  // namespace fluxcpp::ops
