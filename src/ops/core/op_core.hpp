// OpCore: what every collective op shares, written once — its symmetric segment (the op declares
// named regions, the core adds its own), the per-call handshake, the transport between hosts,
// the broken state, the benchmark paths and the release protocol. An op's forward is one call:
//
//   core_.run(Path::kFused, descriptor, /*noop=*/m == 0, [&](const Call& call) { ... });
//
// run() checks that the op is usable and not in use by another thread, runs the handshake (not
// for gemm-only, which is local), skips the body of an agreed no-op, runs the body, completes
// the call's transfers, and applies the failure rules: kInvalidArgument and misuse leave the op
// usable; any other error breaks it (every later call is kInvalidUsage naming the first failure).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "comm/parts.hpp"
#include "comm/transport.hpp"
#include "error_util.hpp"
#include "fault.hpp"
#include "kernels/blas_threads.hpp"
#include "ops/core/handshake.hpp"
#include "ops/core/links.hpp"
#include "shm/layout.hpp"
#include "shm/symmetric_buffer.hpp"

namespace fluxcpp::ops {

// The implementation behind a public op class (include/fluxcpp/<op>.hpp holds it through a
// std::unique_ptr), or kInvalidUsage "<op>: use of a moved-from op": the first of a call's
// usability rules, before OpCore::run's.
template <class Impl>
Impl& checked(const std::unique_ptr<Impl>& p, const char* op) {
  if (!p) raise(Errc::kInvalidUsage, "{}: use of a moved-from op", op);
  return *p;
}
// The same for an implementation that names its op (Impl::kOp).
template <class Impl>
Impl& checked(const std::unique_ptr<Impl>& p) {
  return checked(p, Impl::kOp);
}

using Deadline = std::chrono::steady_clock::time_point;

// kFused: the op. kGemmOnly / kCommOnly: the benchmark paths (local GEMM on whatever the buffers
// hold; the collective data movement without the GEMM).
enum class Path { kFused, kGemmOnly, kCommOnly };

struct Call {
  uint64_t epoch = 0;  // call number (the handshake's); gemm-only: the last collective call's
  Path path = Path::kFused;
  Deadline deadline{};
  bool comm() const { return path != Path::kGemmOnly; }
  bool compute() const { return path != Path::kCommOnly; }
};

class OpCore {
 public:
  struct Spec {
    const char* op = "";
    std::array<const char*, kCallFields> fields{};
    int vector_len = 0;  // per-rank counts agreed in the handshake (0: none)
    // Room for a payload riding on the handshake (CallDescriptor::payload; 0: none).
    std::size_t payload_bytes = 0;
    // Host peers read this rank's segment during a call and something writes it outside a call
    // (a gemm-only path, the caller through a zero-copy input buffer): every call then ends by
    // releasing the host peers' segments, and such writers wait for the release first.
    bool releases = false;
    // The gemm-only path writes this rank's segment (so it first waits for that release).
    bool local_writes = false;
    // The op runs GEMMs: each call holds OpenBLAS at one thread (our workers are the
    // parallelism) and restores the caller's setting when the last call leaves.
    bool gemm = false;

    // Spec::of("gemm_rs", {"m"}).runs_gemm().releasing().writing_locally()
    static Spec of(const char* op, std::initializer_list<const char*> fields = {}) {
      Spec s;
      s.op = op;
      std::size_t i = 0;
      for (const char* f : fields)
        if (i < s.fields.size()) s.fields[i++] = f;
      for (; i < s.fields.size(); ++i) s.fields[i] = "";
      return s;
    }
    Spec& runs_gemm() { return gemm = true, *this; }
    Spec& releasing() { return releases = true, *this; }
    Spec& writing_locally() { return local_writes = true, *this; }
    Spec& with_vector(int n) { return vector_len = n, *this; }
    Spec& with_payload(std::size_t bytes) { return payload_bytes = bytes, *this; }
  };

  // Collective. `layout` holds the op's regions (declared before); the core adds its own,
  // allocates the segment on every host (agreed world-wide: a full /dev/shm on one host fails
  // every rank), binds the layout and, across hosts, builds the transport. `links`: the op's
  // link table, which must outlive the core.
  OpCore(const comm::Parts& c, const Links& links, const Spec& spec, shm::Layout& layout);
  OpCore(const OpCore&) = delete;
  OpCore& operator=(const OpCore&) = delete;
  ~OpCore();

  template <class Body>
  void run(Path path, const CallDescriptor& d, bool noop, Body&& body);

  // Local checks outside a collective call (zero-copy input_buffer and the like).
  void check_usable() const;

  const comm::Parts& parts() const { return *ctx_; }
  const char* op() const { return spec_.op; }
  uint64_t epoch() const { return epoch_; }
  const Handshake& handshake() const { return hs_; }
  // How this rank reaches its peers, and the orders in which it visits them (links.hpp).
  const Links& links() const { return *links_; }
  comm::Transport* transport() { return transport_.get(); }
  bool multi_host() const { return links_->networked(); }
  const shm::Layout& layout() const { return *layout_; }

  // Compute-side progress: lets the transport move data (call between GEMM tiles). Cheap when
  // there is nothing in flight.
  void poll() {
    if (transport_ && !transport_->idle()) transport_->progress();
  }
  bool transfers_pending() const { return transport_ && !transport_->idle(); }
  // Completes what is in flight (before a long stretch with no progress, e.g. one big GEMM, so
  // no peer waits for this rank's bytes meanwhile); kTimeout at the context's deadline.
  void finish_transfers() {
    if (transfers_pending()) transport_->complete(ctx_->runtime().deadline());
  }
  // Waits until `s` reaches `target`, driving the transport while it has work (the signal may be
  // raised by it, and this rank's own sends need progress too). Raises the transport's error if
  // it failed, kTimeout naming `peer` and `what` when nothing arrives within the timeout,
  // kInternal if `stop` is raised (an offloaded task whose caller gave up).
  void wait(const shm::Signal& s, uint64_t target, int peer, const std::string& what,
            const std::atomic<bool>* stop = nullptr);

  // The release protocol (Spec::releases): waits until every host peer released this rank's
  // segment after the last call that read it.
  void wait_released();
  // Called in a call's body, on every rank alike (from agreed values): no rank read a host peer's
  // segment in this call (the data rode on the handshake), so the call ends without a release.
  void skip_release() { skip_release_ = true; }

 private:
  void begin_call(Path path, const CallDescriptor& d, Call& call);
  void end_call();
  // The failure rules for an error thrown by a call's body.
  void fail(Path path, std::exception_ptr e) noexcept;
  void release_peers();

  const comm::Parts* ctx_;
  const Links* links_;
  Spec spec_;
  shm::Layout* layout_;
  Handshake hs_;
  shm::SignalArray released_;  // [L]: released[q] in our segment = last call q released
  shm::SymmetricBuffer buf_;
  std::unique_ptr<comm::Transport> transport_;
  uint64_t epoch_ = 0;
  uint64_t released_epoch_ = 0;  // the last call that released the host peers
  bool skip_release_ = false;
  std::string broken_;  // the first failure that broke the op
};

// RAII: the context is in use by this thread for the scope (kInvalidUsage for a second thread).
class ContextEntry {
 public:
  ContextEntry(const comm::Parts& c, const char* op);
  ~ContextEntry();
  ContextEntry(const ContextEntry&) = delete;
  ContextEntry& operator=(const ContextEntry&) = delete;

 private:
  const comm::Parts& c_;
};

template <class Body>
void OpCore::run(Path path, const CallDescriptor& d, bool noop, Body&& body) {
  ContextEntry entry(*ctx_, spec_.op);
  std::optional<kernels::BlasSingleThreadScope> blas;
  if (spec_.gemm && path != Path::kCommOnly) blas.emplace();
  Call call;
  begin_call(path, d, call);
  if (noop) return;
  fault_point("forward", ctx_->topo().world_rank());
  try {
    body(static_cast<const Call&>(call));
    if (path != Path::kGemmOnly) end_call();
  } catch (...) {
    fail(path, std::current_exception());
    throw;
  }
}

// The handshake payload room of an op's latency path (OpCore::Spec::with_payload) for calls of
// at most `max_bytes`: on one host with peers, up to 256 KiB at two ranks and 64 KiB above (the
// sizes up to which every rank reading every peer's data in one round beats two rounds on a
// share; docs/design.md); 0 elsewhere (no latency path). `across_hosts`: the op's latency path
// reads every rank's payload (Handshake::payload_of), so it also runs across hosts when each has
// one rank: there the payloads ride in the rail records, up to 256 KiB / (hosts - 1) (the
// descriptors' round trip carries the data, instead of a round trip before the data moves).
std::size_t latency_payload_bytes(const Links& links, std::size_t max_bytes,
                                  bool across_hosts = false);

// Whether an op's data regions are needed: host peers read them or the network moves them, or
// the op computes into them even when alone (`always`).
bool needs_data(const Links& links, bool always = false);

}  // namespace fluxcpp::ops
