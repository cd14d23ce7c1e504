// BlockExchange: the all-gather machinery of equal row blocks that AllGather and the fused
// all-gather ops share (one segment per rank, the per-call handshake, chunk progress signals,
// the MPI rail between hosts, the single-copy probe). See docs/design.md.
//
// Segment layout (every rank, same size):
//   SyncBlock | Signal progress[slots] | Signal extra[extra_signals] | Signal released[L] |
//   scratch | block slots[slots]
// progress[i] counts chunks landed in slot i as (epoch << 32) | chunks. By default there is one
// slot per host (the all-gather layout): slot n holds the block of this rank's rail peer on host
// n, and slot node_id the rank's own staged block, which host peers read. Ops with other layouts
// pass their own slot count and name the slots MPI sends from and receives into, or describe
// arbitrary point-to-point transfers between their segments and any rank (start_transfers).
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/context_impl.hpp"
#include "comm/mpi_util.hpp"
#include "ops/call_sync.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::ops {

using Deadline = std::chrono::steady_clock::time_point;

class BlockExchange {
 public:
  BlockExchange() = default;
  // Collective over the context's world. max_block_bytes: one rank's block at max_m.
  // probe_cma: also check whether process_vm_readv works between the ranks of each host.
  // slots: 0 means one per host (the all-gather layout). The slots exist only when peers or MPI
  // use them, unless always_slots (the op computes into them even when alone).
  // scratch_bytes: a small per-rank shared area host peers can read (always allocated).
  BlockExchange(detail::ContextImpl& ctx, const char* op, std::size_t max_block_bytes,
                int extra_signals, std::array<const char*, kSyncFields> field_names, bool probe_cma,
                int slots = 0, bool always_slots = false, std::size_t scratch_bytes = 0);
  BlockExchange(BlockExchange&&) = delete;
  ~BlockExchange();

  // Starts call `++epoch`: the handshake of CallSync. Throws kInvalidArgument on every rank on
  // bad or disagreeing arguments; other errors mark the exchange broken.
  uint64_t begin(const SyncFields& fields, const std::string& local_error, uint64_t extra = 0);
  // Raises kInvalidUsage when an earlier call failed midway (timeout, MPI, system error).
  void check_usable() const;
  // The checks of a local (non-collective) path such as gemm-only: check_usable(), then
  // kInvalidArgument with `local_error` if it is not empty.
  void check_local(const std::string& local_error) const;
  void mark_broken() { broken_ = true; }
  // Runs the data-moving part of a call (after begin()): a failure midway leaves the op unusable.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (...) {
      broken_ = true;
      throw;
    }
  }
  uint64_t epoch() const { return epoch_; }

  char* block(int local, int node) const {
    return static_cast<char*>(buf_.peer(local)) + data_off_ + slot_ * node;
  }
  shm::Signal& progress(int local, int node) const { return signals(local)[node]; }
  shm::Signal& extra_signal(int owner, int i) const { return signals(owner)[slots_ + i]; }
  char* scratch(int local) const { return static_cast<char*>(buf_.peer(local)) + scratch_off_; }

  // Tells every host peer that this rank no longer reads its segment in the current call. Ops
  // whose benchmark paths write into their own segment outside the handshake call this at the
  // end of a call, and wait_released() before such a write.
  void release_peers();
  // Waits until every host peer has released this rank's segment for the latest call that
  // released (calls that were no-ops or failed their handshake release nothing; every rank of
  // the host agrees on which those were). Raises kTimeout naming the peer.
  void wait_released();
  // Waits until extra signal `index` of host rank `owner` reaches `value` (an op's own block or
  // receive signals). Raises kTimeout naming `peer` and "what[index % W]", or — when a transfer
  // of this call failed on the comm thread — that transfer's error.
  // `stop`: also ends the wait (an offloaded task whose caller gave up).
  void wait_extra(int owner, int index, uint64_t value, Deadline deadline, int peer,
                  const char* what, const std::atomic<bool>* stop = nullptr);
  // The handshake's per-rank word of node rank q for the current call.
  uint64_t extra(int q) const { return sync_.extra(q, epoch_); }

  std::size_t chunk_bytes() const { return static_cast<std::size_t>(ctx_->config().chunk_bytes); }
  uint64_t num_chunks(std::size_t bytes) const {
    return (bytes + chunk_bytes() - 1) / chunk_bytes();
  }
  static uint64_t progress_value(uint64_t epoch, uint64_t chunks) { return (epoch << 32) | chunks; }

  // Copies `bytes` of input into this rank's own block and publishes all its chunks.
  void stage(const char* input, std::size_t bytes);
  // Publishes that `chunks` chunks of this rank's own block have landed.
  void publish(uint64_t chunks) {
    shm::signal_set(progress(ctx_->node_rank(), ctx_->node_id()), progress_value(epoch_, chunks));
  }
  // Waits until block (q, node) has at least `chunks` chunks of this call; returns how many it
  // has (possibly more). Raises kTimeout naming the rank that owns the block.
  // `owner`: the world rank to name on a timeout (default: derived from the all-gather layout).
  // `stop`: also ends the wait (an offloaded task whose caller gave up).
  uint64_t wait(int q, int node, uint64_t chunks, Deadline deadline, const char* what,
                int owner = -1, const std::atomic<bool>* stop = nullptr);

  // Across hosts: swap the staged own block (`bytes`) with the rail peers over MPI, on the comm
  // stream (or inline when alone on the host). A received block raises progress(me, n) to all
  // its chunks at once: MPI delivers whole blocks. Call stage() first. polite: the caller computes
  // meanwhile, so poll MPI with back-off sleeps instead of flat out.
  // staged_later: stage() has not run yet (a copy task does it): each send waits for its slot's
  // progress to reach the whole block.
  void start_rail(std::size_t bytes, bool polite = false, bool staged_later = false);
  // The general form: to the rail peer on host n send slot send_slot[n], from it receive into
  // slot recv_slot[n] (entries for our own host are ignored).
  void start_rail(std::size_t bytes, std::vector<int> send_slot, std::vector<int> recv_slot,
                  bool polite, bool staged_later = false);
  // stage() in chunks, publishing each as it lands (for a copy task: peers start early).
  void stage_chunks(const char* input, std::size_t bytes);
  // Point-to-point transfers between this rank's segment and any world rank, over MPI on the
  // comm stream. A send is posted once `signal` (if set) reaches `value` — so an op may start
  // the transfers before it has produced what they send; a receive raises `signal` to `value`
  // when it completes. Zero-byte transfers are skipped (both sides must agree on the sizes).
  // Runs inline — posted and completed before start_transfers returns — when `now` is set or
  // this rank is alone on its host, provided every send is ready (no send signal). Ops that have
  // nothing to compute until the data arrives use `now`: it saves the hand-off to the comm
  // thread, which costs more than it hides when ranks share cores.
  struct Transfer {
    bool send = false;
    int peer = 0;         // world rank
    char* buf = nullptr;  // inside this rank's segment
    std::size_t bytes = 0;
    shm::Signal* signal = nullptr;
    uint64_t value = 0;
  };
  void start_transfers(std::vector<Transfer> transfers, bool polite, bool now = false);
  // Waits for the rail transfers of this call; rethrows their error.
  void finish_rail();
  // Across hosts: MPI_Allgather of `bytes` per rank over the world, bounded by the timeout.
  void allgather(const void* mine, void* all, std::size_t bytes);
  // Single-copy reads within the host (process_vm_readv): read(q) for every host peer q in ring
  // order; each then learns through done signal extra_signal(q, done_base + me) that we are done
  // with its memory, and we wait until every peer is done with ours (the caller may reuse its
  // buffers once we return). Uses extra signals [done_base, done_base + L] (the last one: the
  // owner's "withdrawn" epoch after a timeout).
  void cma_pull(int done_base, const std::function<void(int q)>& read);
  // Scope guard: abandons the rail transfers if the call leaves early.
  class RailScope {
   public:
    explicit RailScope(BlockExchange& ex, bool active) : ex_(ex), active_(active) {}
    ~RailScope();
    void finish() {
      active_ = false;
      ex_.finish_rail();
    }

   private:
    BlockExchange& ex_;
    bool active_;
  };

  bool cma_ok() const { return cma_ok_; }
  pid_t pid(int q) const { return pids_[q]; }
  detail::ContextImpl& ctx() const { return *ctx_; }

 private:
  shm::Signal* signals(int local) const {
    return reinterpret_cast<shm::Signal*>(static_cast<char*>(buf_.peer(local)) + sizeof(SyncBlock));
  }
  void abandon(std::vector<MPI_Request>& reqs, std::size_t nrecv) noexcept;

  detail::ContextImpl* ctx_ = nullptr;
  const char* op_ = "";
  std::size_t slot_ = 0, data_off_ = 0, scratch_off_ = 0;
  int slots_ = 0, extra_ = 0;
  shm::SymmetricBuffer buf_;
  CallSync sync_;
  comm::UniqueComm rail_;
  comm::UniqueComm world_;  // across hosts: the transfers' communicator
  uint64_t epoch_ = 0;
  bool broken_ = false;
  std::atomic<bool> abort_{false};
  uint64_t rail_ticket_ = 0;
  std::vector<pid_t> pids_;
  bool cma_ok_ = false;
  // An abandoned MPI transfer may still touch our segment: keep it mapped for good.
  bool poisoned_ = false;
  bool leak_world_ = false;      // an abandoned MPI_Iallgather may still use world_
  uint64_t released_epoch_ = 0;  // the last call that released the host peers
};

}  // namespace fluxcpp::ops
