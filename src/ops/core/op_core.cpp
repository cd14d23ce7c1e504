#include "ops/core/op_core.hpp"

#include <cmath>

#include <algorithm>
#include <iterator>

#include "comm/drive_wait.hpp"
#include "error_util.hpp"

namespace fluxcpp::ops {

namespace {
bool breaks(Path path, const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    // A local path that rejected its arguments touched nothing; everything else was interrupted
    // midway through a protocol that the peers follow too.
    return !(path == Path::kGemmOnly && err.code() == Errc::kInvalidArgument);
  } catch (...) {
    return true;
  }
}

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown error";
  }
}
}  // namespace

std::size_t latency_payload_bytes(const Links& links, std::size_t max_bytes, bool across_hosts) {
  // Across hosts every rank sends its payload to each other host: 256 KiB in all.
  const std::size_t N = static_cast<std::size_t>(links.hosts());
  const int L = links.host_size();
  if (N > 1)
    return across_hosts && L == 1 ? std::min<std::size_t>(max_bytes, (256 << 10) / (N - 1)) : 0;
  if (L == 1) return 0;
  return std::min<std::size_t>(max_bytes, L <= 2 ? 256 << 10 : 64 << 10);
}

bool needs_data(const Links& links, bool always) {
  return always || links.world() > 1;
}

ContextEntry::ContextEntry(const comm::Parts& c, const char* op) : c_(c) {
  c_.life().check_process(op);  // before the owner thread: a fork's copy of it means nothing
  if (!c_.life().try_enter())
    raise(Errc::kInvalidUsage,
          "{}: the context is in use by another thread (a context and its ops are used by one "
          "thread at a time; rank {})",
          op, c_.topo().world_rank());
}

ContextEntry::~ContextEntry() {
  c_.life().leave();
}

OpCore::OpCore(const comm::Parts& c, const Links& links, const Spec& spec, shm::Layout& layout)
    : ctx_(&c), links_(&links), spec_(spec), layout_(&layout) {
  const char* op = spec.op;
  comm::Group& comm = c.control();
  // Settings the protocols depend on: every rank must use the same.
  comm::agree_value(comm, op, "FLUXCPP_CHUNK_KB", c.runtime().config().chunk_bytes / 1024);
  comm::agree_value(comm, op, "FLUXCPP_NET_CHUNK_KB", c.runtime().config().net_chunk_bytes / 1024);
  comm::agree_choice(comm, op, "FLUXCPP_COPY_ENGINE",
                     static_cast<int>(c.runtime().config().copy_engine), kCopyEngineNames,
                     static_cast<int>(std::size(kCopyEngineNames)));
  const char* cma_names[] = {"FLUXCPP_CMA_MIN_KB", "FLUXCPP_CMA_MAX_RATIO (x1000)"};
  const long long cma_values[] = {c.runtime().config().cma_min_bytes / 1024,
                                  std::llround(c.runtime().config().cma_max_ratio * 1000)};
  comm.agree_values(op, cma_names, cma_values, 2);
  comm::agree(comm, [&] {
    if (links.networked() && !links.uniform())
      raise(Errc::kInvalidUsage,
            "{}: hosts with different numbers of ranks are not supported yet ({} ranks on {} "
            "hosts)",
            op, links.world(), links.hosts());
  });
  hs_ = Handshake(c, links, op, c.life().creating_serial(), layout, spec.fields, spec.vector_len,
                  spec.payload_bytes);
  released_ = layout.signals("released", links.host_size());
  // Agreed world-wide: a host whose /dev/shm is full must not leave the other hosts waiting.
  // The segment's bootstrap agrees on its host (its ranks raise the same AgreedError); across
  // hosts the host's verdict is agreed once more over the context's group, so every host fails
  // the create alike. (Anything else, a timeout midway, stays this host's: it breaks the
  // context, as in any create.)
  if (links.networked()) {
    std::string host_error;
    Errc host_code = Errc::kSystem;
    try {
      buf_ = shm::SymmetricBuffer(c.host(), layout.bytes(), c.life().creating_tag());
    } catch (const AgreedError& e) {
      host_error = e.what();
      host_code = e.code();
    }
    comm::agree(comm, [&] {
      if (!host_error.empty()) throw Error(host_code, host_error);
    });
  } else {
    buf_ = shm::SymmetricBuffer(c.host(), layout.bytes(), c.life().creating_tag());
  }
  layout.bind(buf_);
  if (links.networked())
    transport_ =
        comm::make_transport(c, op, static_cast<std::size_t>(c.runtime().config().net_chunk_bytes));
}

OpCore::~OpCore() {
  if (!ctx_->life().in_creator()) return;  // a copy made by fork(): see process_owner.hpp
  // A transfer that may still touch the segment keeps it mapped for good.
  if (transport_ && (!transport_->idle() || transport_->poisoned())) {
    transport_->abandon(Error(Errc::kInternal, std::string(spec_.op) + ": destroyed"));
    if (transport_->poisoned()) new shm::SymmetricBuffer(std::move(buf_));
  }
}

void OpCore::check_usable() const {
  ctx_->life().check_usable(spec_.op);
  if (!broken_.empty())
    raise(Errc::kInvalidUsage,
          "{}: the op failed earlier and must be destroyed (first failure: {})", spec_.op, broken_);
}

void OpCore::begin_call(Path path, const CallDescriptor& d, Call& call) {
  check_usable();
  call.path = path;
  if (path == Path::kGemmOnly) {
    if (!d.error.empty()) throw Error(d.error_code, d.error);
    if (spec_.local_writes) wait_released();
    call.epoch = epoch_;
    call.deadline = ctx_->runtime().deadline();
    return;
  }
  skip_release_ = false;
  call.epoch = ++epoch_;
  try {
    hs_.exchange(epoch_, d);
  } catch (const Error& e) {
    // Rejected arguments and misuse leave the op usable; a call-identity mismatch, a timeout or
    // a network failure leave the peers at an unknown point of the protocol.
    if (hs_.mismatched() || (e.code() != Errc::kInvalidArgument && e.code() != Errc::kInvalidUsage))
      broken_ = e.what();
    throw;
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
  if (d.agreed_check) {
    std::string err = d.agreed_check();
    if (!err.empty()) throw Error(Errc::kInvalidArgument, err);
  }
  call.deadline = ctx_->runtime().deadline();
}

void OpCore::end_call() {
  if (transport_ && !transport_->idle()) transport_->complete(ctx_->runtime().deadline());
  if (transport_) transport_->raise_if_failed();
  if (spec_.releases && links_->host_size() > 1 && !skip_release_) release_peers();
  skip_release_ = false;
}

void OpCore::fail(Path path, std::exception_ptr e) noexcept {
  if (!breaks(path, e)) return;
  if (broken_.empty()) broken_ = describe(e);
  if (transport_ && !transport_->idle())
    transport_->abandon(
        Error(Errc::kInternal, std::string(spec_.op) + ": call abandoned: " + broken_));
}

void OpCore::release_peers() {
  const int L = links_->host_size(), me = links_->local();
  for (int q = 0; q < L; ++q)
    if (q != me) shm::signal_set(released_.at(q, me), epoch_);
  released_epoch_ = epoch_;
}

void OpCore::wait_released() {
  const int L = links_->host_size(), me = links_->local();
  for (int q = 0; q < L; ++q)
    if (q != me) wait(released_.at(me, q), released_epoch_, links_->member(q), released_.label(q));
}

void OpCore::wait(const shm::Signal& s, uint64_t target, int peer, const std::string& what,
                  const std::atomic<bool>* stop) {
  if (shm::signal_load(s) >= target) return;
  const comm::Parts& c = *ctx_;
  uint64_t observed = 0;
  comm::DriveWait how{c.runtime().wait_policy(), comm::kTransportWait};
  // A transport that needs no driving (the TCP channel) fails on its own: look every few ms.
  if (transport() != nullptr && !transport()->idle() && !transport()->busy())
    how.idle_slice = std::chrono::milliseconds(2);
  if (comm::wait_driving(transport(), s, target, c.runtime().deadline(), how, &observed, stop))
    return;
  if (stop != nullptr && stop->load(std::memory_order_relaxed))
    raise(Errc::kInternal, "{}: copy task abandoned", spec_.op);
  raise_timeout(c, *links_, spec_.op, peer, what, target, observed);
}

}  // namespace fluxcpp::ops
