#include "ops/core/handshake.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#include "comm/bounded.hpp"
#include "error_util.hpp"

namespace fluxcpp::ops {

namespace {
constexpr int kMessage = 512;
constexpr int kHead = 5 + kCallFields;  // code, origin, mismatch, serial, call, fields
constexpr int kRailTag = 1;             // (the handshake's own communicator)
constexpr int kRetractTag = 2;          // "I gave this call up": see rail_step
}  // namespace

struct Handshake::Info {
  int64_t code;      // 0, or the Errc of the call's verdict as this rank knows it
  int64_t origin;    // world rank that found it
  int64_t mismatch;  // the verdict is a call-identity mismatch
  int64_t fields[kCallFields];
  uint64_t word;
  uint64_t serial;
  uint64_t call;
  char message[kMessage];
};

void raise_timeout(const detail::ContextImpl& ctx, const char* op, int peer,
                   const std::string& what, uint64_t expected, uint64_t observed) {
  raise(Errc::kTimeout,
        "{}: timed out after {} s waiting for rank {} (host {}, local rank {}) on {}: expected >= "
        "{}, observed {} (this is rank {})",
        op, ctx.config().timeout_s, peer, ctx.node_of(peer), ctx.local_of(peer), what, expected,
        observed, ctx.world_rank());
}

void Handshake::Verdict::merge(const Verdict& o) {
  if (o.origin < 0) return;
  // A call-identity mismatch wins over argument errors: it breaks the op, so every rank must see
  // it. Otherwise the lowest reporting rank wins, which every rank picks alike.
  if (origin < 0 || (o.mismatch && !mismatch) || (o.mismatch == mismatch && o.origin < origin))
    *this = o;
}

Handshake::Handshake(detail::ContextImpl& c, const char* op, uint64_t serial, shm::Layout& layout,
                     std::array<const char*, kCallFields> names, int vector_len,
                     std::size_t payload_bytes)
    : ctx_(&c),
      op_(op),
      serial_(serial),
      names_(names),
      vlen_(vector_len),
      payload_bytes_(payload_bytes) {
  header_ = layout.signals("call-header", 2);
  info_ = layout.slots("call-info", 2, sizeof(Info));
  vectors_ = layout.slots("call-vectors", vlen_ > 0 ? 2 : 0,
                          sizeof(int64_t) * static_cast<std::size_t>(vlen_) * c.num_nodes());
  // Across hosts payloads travel on the rail, which carries one rank per host's.
  rail_payload_ = payload_bytes > 0 && c.num_nodes() > 1;
  if (rail_payload_ && c.node_size() > 1)
    raise(Errc::kInternal, "{}: a handshake payload across hosts needs one rank per host", op);
  payloads_ =
      layout.slots("call-payload", payload_bytes > 0 && !rail_payload_ ? 2 : 0, payload_bytes);
  if (c.num_nodes() > 1) {
    rail_ = comm::UniqueComm(detail::ContextImpl::dup_comm(c.rail_comm()));
    rail_what_ = fmt::format("the {} call handshake", op);
  }
}

Handshake::Info& Handshake::info(int host_rank, int parity) const {
  return *reinterpret_cast<Info*>(info_.at(host_rank, parity));
}

uint64_t Handshake::word(int host_rank) const {
  return info(host_rank, static_cast<int>(call_ & 1)).word;
}

const char* Handshake::payload(int host_rank) const {
  if (rail_payload_) return payload_of(ctx_->world_rank_of(ctx_->node_id(), host_rank));
  return payloads_.at(host_rank, static_cast<int>(call_ & 1));
}

const char* Handshake::payload_of(int world_rank) const {
  const detail::ContextImpl& c = *ctx_;
  if (rail_payload_) return rail_record(c.node_of(world_rank)) + rail_head_bytes();
  return payloads_.at(c.local_of(world_rank), static_cast<int>(call_ & 1));
}

const int64_t* Handshake::vector(int world_rank) const {
  const detail::ContextImpl& c = *ctx_;
  return reinterpret_cast<const int64_t*>(
             vectors_.at(c.local_of(world_rank), static_cast<int>(call_ & 1))) +
         static_cast<std::size_t>(c.node_of(world_rank)) * vlen_;
}

void Handshake::check_peer(uint64_t call, const CallFields& fields, const Info& p, int peer,
                           Verdict& v) {
  const detail::ContextImpl& c = *ctx_;
  const int r = c.world_rank();
  if (p.serial != serial_ || p.call != call) {
    v.merge({Errc::kInvalidUsage, std::min(r, peer), true,
             fmt::format("{}: ranks are at different calls of the op: rank {} is at call {}, rank "
                         "{} at call {} (a rank skipped or repeated a call after an error); the "
                         "op must be destroyed",
                         op_, r, call, peer, p.call)});
    return;
  }
  if (p.code != 0) {
    v.merge({static_cast<Errc>(p.code), static_cast<int>(p.origin), p.mismatch != 0, p.message});
    return;
  }
  for (int f = 0; f < kCallFields; ++f)
    if (p.fields[f] != fields[f]) {
      v.merge({Errc::kInvalidArgument, std::min(r, peer), false,
               fmt::format("{}: ranks disagree on {}: rank {} passed {}, rank {} passed {}", op_,
                           names_[f], r, fields[f], peer, p.fields[f])});
      return;
    }
}

namespace {
constexpr std::size_t kLine = 64;
std::size_t round_up(std::size_t bytes) {
  return (bytes + kLine - 1) / kLine * kLine;
}
char* line_aligned(std::vector<char>& v) {
  return reinterpret_cast<char*>(round_up(reinterpret_cast<std::uintptr_t>(v.data())));
}
}  // namespace

// A record per host (this rank's too): the header and vector, then the payload (cache-line
// aligned: the latency path's GEMM writes its output there).
struct Handshake::Rail {
  Rail(std::size_t record, int hosts) : all_(record * static_cast<std::size_t>(hosts) + kLine) {}
  char* all() { return line_aligned(all_); }
  std::vector<char> text, texts;

 private:
  std::vector<char> all_;
};

std::size_t Handshake::rail_head_bytes() const {
  return round_up(sizeof(int64_t) * (kHead + static_cast<std::size_t>(vlen_)));
}

std::size_t Handshake::rail_record_bytes() const {
  return rail_head_bytes() + (rail_payload_ ? round_up(payload_bytes_) : 0);
}

char* Handshake::rail_record(int node) const {
  return rail_buf_->all() + rail_record_bytes() * static_cast<std::size_t>(node);
}

// Across hosts: the rail peers swap descriptors (and vectors, and with one rank per host the
// payloads) first, so that what a rank then publishes on its host already covers its rail.
// Point to point, into a record per host: a rank sends its header and the payload it wrote
// (`payload_len` of it: a decode call's few KiB, not the op's whole room) and receives up to a
// whole record from each peer (a shorter message fills its start), so ranks that disagree on a
// call's size still meet, and the header says so.
void Handshake::rail_step(uint64_t call, const CallDescriptor& d, std::size_t payload_len,
                          Verdict& v) {
  detail::ContextImpl& c = *ctx_;
  const int N = c.num_nodes(), me = c.node_rank(), nid = c.node_id();
  Rail& b = *rail_buf_;
  auto* m = reinterpret_cast<int64_t*>(rail_record(nid));
  std::fill(m, m + kHead + vlen_, int64_t{0});
  m[0] = v.origin >= 0 ? static_cast<int64_t>(v.code) : 0;
  m[1] = v.origin;
  m[2] = 0;
  m[3] = static_cast<int64_t>(serial_);
  m[4] = static_cast<int64_t>(call);
  for (int f = 0; f < kCallFields; ++f) m[5 + f] = d.fields[f];
  if (d.vector != nullptr) std::memcpy(m + kHead, d.vector, sizeof(int64_t) * vlen_);
  const auto deadline = c.deadline();
  const comm::BackoffPolicy wait = comm::peer_wait(c.wait_policy());
  const std::string& what = rail_what_;
  std::vector<int> peers;  // the other hosts' rail ranks (host n is rail rank n)
  std::vector<MPI_Request> recvs(N - 1, MPI_REQUEST_NULL), sends(N - 1, MPI_REQUEST_NULL);
  for (int i = 1; i < N; ++i) peers.push_back((nid + i) % N);
  const std::size_t sent = rail_head_bytes() + (v.origin < 0 ? payload_len : 0);
  try {
    for (std::size_t i = 0; i < peers.size(); ++i)
      comm::check_mpi(MPI_Irecv(rail_record(peers[i]), static_cast<int>(rail_record_bytes()),
                                MPI_BYTE, peers[i], kRailTag, rail_.get(), &recvs[i]),
                      "MPI_Irecv");
    for (std::size_t i = 0; i < peers.size(); ++i)
      comm::check_mpi(MPI_Isend(rail_record(nid), static_cast<int>(sent), MPI_BYTE, peers[i],
                                kRailTag, rail_.get(), &sends[i]),
                      "MPI_Isend");
  } catch (...) {  // what was posted may still touch the records
    comm::adopt_requests(recvs, rail_.get(), rail_buf_, "a receive of " + what);
    comm::adopt_requests(sends, rail_.get(), rail_buf_, "a send of " + what);
    throw;
  }
  const std::vector<std::size_t> late =
      comm::wait_messages(recvs, sends, rail_.get(), deadline, wait, rail_buf_, what);
  if (!late.empty()) {
    std::string who;
    for (std::size_t i : late)
      who += fmt::format("{}{}", who.empty() ? "" : ", ", c.world_rank_of(peers[i], me));
    // The late peers already have our record of this call (with the payload on the latency
    // path): tell them this rank gave the call up, so that a late one that arrives fails too
    // instead of completing with a peer whose op is broken (or, had it skipped a call, pairing
    // two different calls).
    auto retraction = std::make_shared<std::array<int64_t, 2>>(
        std::array<int64_t, 2>{static_cast<int64_t>(call), static_cast<int64_t>(c.world_rank())});
    std::vector<MPI_Request> notes(late.size(), MPI_REQUEST_NULL);
    for (std::size_t j = 0; j < late.size(); ++j)
      MPI_Isend(retraction->data(), 2, MPI_INT64_T, peers[late[j]], kRetractTag, rail_.get(),
                &notes[j]);
    comm::adopt_requests(notes, rail_.get(), retraction, "a retraction of " + what);
    raise(Errc::kTimeout,
          "{}: timed out after {} s in the call handshake with rank(s) {} on other hosts (this is "
          "rank {})",
          op_, c.config().timeout_s, who, c.world_rank());
  }
  // A peer that gave this call up before our record reached it (its retraction follows its
  // record): the call fails here too.
  for (int n : peers) {
    int flag = 0;
    MPI_Status st;
    comm::check_mpi(MPI_Iprobe(n, kRetractTag, rail_.get(), &flag, &st), "MPI_Iprobe");
    if (flag == 0) continue;
    std::array<int64_t, 2> note{};
    comm::check_mpi(MPI_Recv(note.data(), 2, MPI_INT64_T, n, kRetractTag, rail_.get(), &st),
                    "MPI_Recv");
    const int peer = c.world_rank_of(n, me);
    v.merge({Errc::kTimeout, peer, false,
             fmt::format("{}: rank {} timed out waiting for rank {} in the call handshake of call "
                         "{} and gave the call up; the op must be destroyed",
                         op_, peer, c.world_rank(), note[0])});
  }
  auto missing = [&] {
    return fmt::format(
        "{}: timed out after {} s exchanging error messages in the call handshake "
        "with the other hosts (this is rank {})",
        op_, c.config().timeout_s, c.world_rank());
  };
  MPI_Request req;
  auto head = [&](int n) { return reinterpret_cast<const int64_t*>(rail_record(n)); };
  bool any_bad = false;
  for (int n = 0; n < N; ++n) any_bad = any_bad || head(n)[0] != 0;
  if (any_bad) {  // every rail rank sees the same codes, so all of them take this branch
    b.text.assign(kMessage, '\0');
    std::snprintf(b.text.data(), kMessage, "%s", v.message.c_str());
    b.texts.assign(static_cast<std::size_t>(kMessage) * N, '\0');
    comm::check_mpi(MPI_Iallgather(b.text.data(), kMessage, MPI_CHAR, b.texts.data(), kMessage,
                                   MPI_CHAR, rail_.get(), &req),
                    "MPI_Iallgather");
    comm::wait_bounded(req, rail_.get(), deadline, rail_buf_, missing, nullptr, wait);
  }
  for (int n = 0; n < N; ++n) {
    if (n == nid) continue;
    const int64_t* p = head(n);
    Info peer{};
    peer.code = p[0];
    peer.origin = p[1];
    peer.serial = static_cast<uint64_t>(p[3]);
    peer.call = static_cast<uint64_t>(p[4]);
    for (int f = 0; f < kCallFields; ++f) peer.fields[f] = p[5 + f];
    if (any_bad)
      std::memcpy(peer.message, &b.texts[static_cast<std::size_t>(kMessage) * n], kMessage);
    peer.message[kMessage - 1] = '\0';
    check_peer(call, d.fields, peer, c.world_rank_of(n, me), v);
  }
  if (vlen_ > 0) {
    auto* area = reinterpret_cast<int64_t*>(vectors_.at(me, static_cast<int>(call & 1)));
    for (int n = 0; n < N; ++n)
      std::memcpy(area + static_cast<std::size_t>(n) * vlen_, head(n) + kHead,
                  sizeof(int64_t) * vlen_);
  }
}

// Runs the descriptor's payload writer into `slot`; its failure becomes this rank's verdict.
void Handshake::write_payload(const CallDescriptor& d, char* slot, Verdict& v) const {
  if (!d.payload || v.origin >= 0 || payload_bytes_ == 0) return;
  try {
    d.payload(slot);
  } catch (const Error& e) {
    v = {e.code(), ctx_->world_rank(), false, e.what()};
  } catch (const std::exception& e) {
    v = {Errc::kInternal, ctx_->world_rank(), false, e.what()};
  }
}

void Handshake::exchange(uint64_t call, const CallDescriptor& d) {
  detail::ContextImpl& c = *ctx_;
  const int me = c.node_rank(), L = c.node_size(), nid = c.node_id();
  const int parity = static_cast<int>(call & 1);
  call_ = call;
  Verdict v;
  if (!d.error.empty()) v = {d.error_code, c.world_rank(), false, d.error};
  if (rail_.get() != MPI_COMM_NULL) {
    // A timed-out exchange's orphans may still use its buffers: never reuse those.
    if (!rail_buf_ || rail_buf_.use_count() > 1) {
      rail_buf_ = std::make_shared<Rail>(rail_record_bytes(), c.num_nodes());
    }
    // With one rank per host the payload leaves with the descriptor.
    std::size_t payload_len = 0;
    if (rail_payload_ && d.payload) {
      write_payload(d, rail_record(c.node_id()) + rail_head_bytes(), v);
      payload_len = d.payload_len > 0 ? std::min(d.payload_len, payload_bytes_) : payload_bytes_;
    }
    rail_step(call, d, payload_len, v);
  } else if (vlen_ > 0) {
    auto* area = reinterpret_cast<int64_t*>(vectors_.at(me, parity));
    if (d.vector != nullptr)
      std::memcpy(area, d.vector, sizeof(int64_t) * vlen_);
    else
      std::fill(area, area + vlen_, int64_t{0});
  }

  // The payload: a peer reads this parity's slot only up to its call - 1 ... call - 2, which it
  // finished before publishing call - 1 (seen by our previous exchange).
  if (!rail_payload_) write_payload(d, payloads_.at(me, parity), v);

  // Publish ours: the descriptor first, then the call number (release).
  Info& own = info(me, parity);
  own.code = v.origin >= 0 ? static_cast<int64_t>(v.code) : 0;
  own.origin = v.origin;
  own.mismatch = v.mismatch ? 1 : 0;
  for (int f = 0; f < kCallFields; ++f) own.fields[f] = d.fields[f];
  own.word = d.word;
  own.serial = serial_;
  own.call = call;
  const std::size_t len = std::min<std::size_t>(v.message.size(), kMessage - 1);
  std::memcpy(own.message, v.message.data(), len);
  own.message[len] = '\0';
  shm::signal_set(header_.at(me, parity), call);

  // Read everyone's. A peer overwrites this parity only at call + 2, which needs our header of
  // call + 1: the descriptor is stable while we read it.
  const auto deadline = c.deadline();
  for (int i = 1; i < L; ++i) {
    const int q = (me + i) % L, peer = c.world_rank_of(nid, q);
    uint64_t observed = 0;
    if (!shm::signal_wait(header_.at(q, parity), call, deadline, c.wait_policy(), &observed)) {
      // Our published descriptor (and payload) of this call now says that we gave it up, so a
      // late peer fails too instead of completing with a rank whose op is broken.
      const std::string gone = fmt::format(
          "{}: rank {} timed out waiting for rank {} in the call handshake of call {} "
          "and gave the call up; the op must be destroyed",
          op_, c.world_rank(), peer, call);
      std::snprintf(own.message, kMessage, "%s", gone.c_str());
      own.origin = c.world_rank();
      std::atomic_thread_fence(std::memory_order_release);
      reinterpret_cast<std::atomic<int64_t>&>(own.code).store(static_cast<int64_t>(Errc::kTimeout),
                                                              std::memory_order_release);
      raise_timeout(c, op_, peer, header_.label(parity), call, observed);
    }
    check_peer(call, d.fields, info(q, parity), peer, v);
  }
  if (v.origin < 0) return;
  mismatched_ = mismatched_ || v.mismatch;
  if (v.origin == c.world_rank()) throw Error(v.code, v.message);
  throw Error(v.code, fmt::format("{} (reported by rank {})", v.message, v.origin));
}

}  // namespace fluxcpp::ops
