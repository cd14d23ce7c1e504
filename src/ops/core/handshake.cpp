#include "ops/core/handshake.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

#include "comm/deadline_scope.hpp"
#include "error_util.hpp"
#include "ops/core/refusal.hpp"

namespace fluxcpp::ops {

std::string& call_refusal() {
  thread_local std::string why;
  return why;
}

namespace {
constexpr int kMessage = 512;
constexpr int kHead = 5 + kCallFields;  // code, origin, mismatch, serial, call, fields
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

void raise_timeout(const comm::Parts& ctx, const Links& links, const char* op, int peer,
                   const std::string& what, uint64_t expected, uint64_t observed) {
  const Link& l = links.link(peer);
  raise(Errc::kTimeout,
        "{}: timed out after {} s waiting for rank {} (host {}, local rank {}) on {}: expected >= "
        "{}, observed {} (this is rank {})",
        op, ctx.runtime().config().timeout_s, peer, l.host, l.local, what, expected, observed,
        links.rank());
}

void Handshake::Verdict::merge(const Verdict& o) {
  if (o.origin < 0) return;
  // A call-identity mismatch wins over argument errors: it breaks the op, so every rank must see
  // it. Otherwise the lowest reporting rank wins, which every rank picks alike.
  if (origin < 0 || (o.mismatch && !mismatch) || (o.mismatch == mismatch && o.origin < origin))
    *this = o;
}

Handshake::Handshake(const comm::Parts& c, const Links& links, const char* op, uint64_t serial,
                     shm::Layout& layout, std::array<const char*, kCallFields> names,
                     int vector_len, std::size_t payload_bytes)
    : ctx_(&c),
      links_(&links),
      op_(op),
      serial_(serial),
      names_(names),
      vlen_(vector_len),
      payload_bytes_(payload_bytes) {
  header_ = layout.signals("call-header", 2);
  info_ = layout.slots("call-info", 2, sizeof(Info));
  vectors_ = layout.slots("call-vectors", vlen_ > 0 ? 2 : 0,
                          sizeof(int64_t) * static_cast<std::size_t>(vlen_) * links.hosts());
  // Across hosts payloads travel on the rail, which carries one rank per host's.
  rail_payload_ = payload_bytes > 0 && links.networked();
  if (rail_payload_ && links.host_size() > 1)
    raise(Errc::kInternal, "{}: a handshake payload across hosts needs one rank per host", op);
  payloads_ =
      layout.slots("call-payload", payload_bytes > 0 && !rail_payload_ ? 2 : 0, payload_bytes);
  if (c.topo().num_hosts() > 1)
    rail_ = c.network().rail_swap(c, fmt::format("the {} call handshake", op));
}

Handshake::Handshake(const comm::Parts& c, const char* op, uint64_t serial, shm::Layout& layout,
                     std::array<const char*, kCallFields> names, int vector_len,
                     std::size_t payload_bytes)
    : Handshake(c, std::make_shared<const Links>(Links::of(c)), op, serial, layout, names,
                vector_len, payload_bytes) {}

Handshake::Handshake(const comm::Parts& c, std::shared_ptr<const Links> own, const char* op,
                     uint64_t serial, shm::Layout& layout,
                     std::array<const char*, kCallFields> names, int vector_len,
                     std::size_t payload_bytes)
    : Handshake(c, *own, op, serial, layout, names, vector_len, payload_bytes) {
  own_links_ = std::move(own);
}

Handshake::Info& Handshake::info(int local, int parity) const {
  return *reinterpret_cast<Info*>(info_.at(local, parity));
}

uint64_t Handshake::word(int local) const {
  return info(local, static_cast<int>(call_ & 1)).word;
}

const char* Handshake::payload(int local) const {
  if (rail_payload_) return payload_of(links_->member(local));
  return payloads_.at(local, static_cast<int>(call_ & 1));
}

const char* Handshake::payload_of(int world_rank) const {
  const Link& l = links_->link(world_rank);
  if (rail_payload_) return rail_record(l.host) + rail_head_bytes();
  return payloads_.at(l.local, static_cast<int>(call_ & 1));
}

const int64_t* Handshake::vector(int world_rank) const {
  const Link& l = links_->link(world_rank);
  return reinterpret_cast<const int64_t*>(vectors_.at(l.local, static_cast<int>(call_ & 1))) +
         static_cast<std::size_t>(l.host) * vlen_;
}

void Handshake::check_peer(uint64_t call, const CallFields& fields, const Info& p, int peer,
                           Verdict& v) {
  const comm::Parts& c = *ctx_;
  const int r = c.topo().world_rank();
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
}  // namespace

std::size_t Handshake::rail_head_bytes() const {
  return round_up(sizeof(int64_t) * (kHead + static_cast<std::size_t>(vlen_)));
}

std::size_t Handshake::rail_record_bytes() const {
  return rail_head_bytes() + (rail_payload_ ? round_up(payload_bytes_) : 0);
}

char* Handshake::rail_record(int node) const {
  return rail_->record(node);
}

// Across hosts: the rail peers swap descriptors (and vectors, and with one rank per host the
// payloads) first, so that what a rank then publishes on its host already covers its rail.
// Point to point, into a record per host: a rank sends its header and the payload it wrote
// (`payload_len` of it: a decode call's few KiB, not the op's whole room) and receives up to a
// whole record from each peer (a shorter message fills its start), so ranks that disagree on a
// call's size still meet, and the header says so.
void Handshake::rail_step(uint64_t call, const CallDescriptor& d, std::size_t payload_len,
                          Verdict& v) {
  const comm::Parts& c = *ctx_;
  const Links& l = *links_;
  const int N = l.hosts(), me = l.local(), nid = l.host();
  auto* m = reinterpret_cast<int64_t*>(rail_record(nid));
  std::fill(m, m + kHead + vlen_, int64_t{0});
  m[0] = v.origin >= 0 ? static_cast<int64_t>(v.code) : 0;
  m[1] = v.origin;
  m[2] = 0;
  m[3] = static_cast<int64_t>(serial_);
  m[4] = static_cast<int64_t>(call);
  for (int f = 0; f < kCallFields; ++f) m[5 + f] = d.fields[f];
  if (d.vector != nullptr) std::memcpy(m + kHead, d.vector, sizeof(int64_t) * vlen_);
  const auto deadline = c.runtime().deadline();
  const comm::BackoffPolicy wait = comm::peer_wait(c.runtime().wait_policy());
  comm::RecordSwap::Sends sends;
  sends.bytes = rail_head_bytes() + (v.origin < 0 ? payload_len : 0);
  if (parted_ && v.origin < 0 && payload_len > 0) part_payload(d, sends);
  // The late peers already have our record of this call (with the payload on the latency path):
  // the retraction tells them this rank gave the call up, so that a late one that arrives fails
  // too instead of completing with a peer whose op is broken (or, had it skipped a call,
  // pairing two different calls).
  const std::vector<int> late =
      rail_->swap(sends, deadline, wait,
                  {static_cast<int64_t>(call), static_cast<int64_t>(c.topo().world_rank())});
  if (!late.empty()) {
    std::string who;
    for (int n : late) who += fmt::format("{}{}", who.empty() ? "" : ", ", l.rail(n));
    raise(Errc::kTimeout,
          "{}: timed out after {} s in the call handshake with rank(s) {} on other hosts (this is "
          "rank {})",
          op_, c.runtime().config().timeout_s, who, c.topo().world_rank());
  }
  // A peer that gave this call up before our record reached it (its retraction follows its
  // record): the call fails here too.
  for (const auto& [n, note] : rail_->retractions()) {
    const int peer = l.rail(n);
    v.merge({Errc::kTimeout, peer, false,
             fmt::format("{}: rank {} timed out waiting for rank {} in the call handshake of call "
                         "{} and gave the call up; the op must be destroyed",
                         op_, peer, c.topo().world_rank(), note[0])});
  }
  auto missing = [&] {
    return fmt::format(
        "{}: timed out after {} s exchanging error messages in the call handshake "
        "with the other hosts (this is rank {})",
        op_, c.runtime().config().timeout_s, c.topo().world_rank());
  };
  auto head = [&](int n) { return reinterpret_cast<const int64_t*>(rail_record(n)); };
  bool any_bad = false;
  for (int n = 0; n < N; ++n) any_bad = any_bad || head(n)[0] != 0;
  std::vector<std::string> texts;
  // Every rail rank sees the same codes, so all of them gather the texts, or none.
  if (any_bad) texts = rail_->gather_texts(v.message, deadline, wait, missing);
  for (int n = 0; n < N; ++n) {
    if (n == nid) continue;
    const int64_t* p = head(n);
    Info peer{};
    peer.code = p[0];
    peer.origin = p[1];
    peer.serial = static_cast<uint64_t>(p[3]);
    peer.call = static_cast<uint64_t>(p[4]);
    for (int f = 0; f < kCallFields; ++f) peer.fields[f] = p[5 + f];
    if (any_bad) std::snprintf(peer.message, kMessage, "%s", texts[n].c_str());
    check_peer(call, d.fields, peer, l.rail(n), v);
  }
  if (vlen_ > 0) {
    auto* area = reinterpret_cast<int64_t*>(vectors_.at(me, static_cast<int>(call & 1)));
    for (int n = 0; n < N; ++n)
      std::memcpy(area + static_cast<std::size_t>(n) * vlen_, head(n) + kHead,
                  sizeof(int64_t) * vlen_);
  }
}

// Each other host's record of its own: our header (filled) and its part of our payload, in
// the swap's out records.
void Handshake::part_payload(const CallDescriptor& d, comm::RecordSwap::Sends& sends) const {
  const Links& l = *links_;
  const std::size_t head = rail_head_bytes();
  const char* own = rail_record(l.host());
  sends.parted.assign(static_cast<std::size_t>(l.hosts()), 0);
  for (int n = 0; n < l.hosts(); ++n) {
    if (n == l.host()) continue;
    const auto [off, len] = d.payload_part(l.rail(n));  // checked by check_parts
    char* out = rail_->out_record(n);
    std::memcpy(out, own, head);
    std::memcpy(out + head, own + head + off, len);
    sends.parted[static_cast<std::size_t>(n)] = head + len;
  }
}

// A part outside the payload (an op's bug) becomes this rank's verdict: the call fails on every
// rank instead of sending what is not there.
void Handshake::check_parts(const CallDescriptor& d, std::size_t payload_len, Verdict& v) const {
  const Links& l = *links_;
  for (int n = 0; n < l.hosts() && v.origin < 0; ++n) {
    if (n == l.host()) continue;
    const auto [off, len] = d.payload_part(l.rail(n));
    if (off <= payload_len && len <= payload_len - off) continue;
    v = {Errc::kInternal, ctx_->topo().world_rank(), false,
         fmt::format("{}: the payload's part for rank {} [{}, +{}) is outside its {} bytes "
                     "(rank {})",
                     op_, l.rail(n), off, len, payload_len, ctx_->topo().world_rank())};
  }
}

// Runs the descriptor's payload writer into `slot`; its failure becomes this rank's verdict.
void Handshake::write_payload(const CallDescriptor& d, char* slot, Verdict& v) const {
  if (!d.payload || v.origin >= 0 || payload_bytes_ == 0) return;
  try {
    d.payload(slot);
  } catch (const Error& e) {
    v = {e.code(), ctx_->topo().world_rank(), false, e.what()};
  } catch (const std::exception& e) {
    v = {Errc::kInternal, ctx_->topo().world_rank(), false, e.what()};
  }
}

void Handshake::exchange(uint64_t call, const CallDescriptor& d) {
  const comm::Parts& c = *ctx_;
  const int me = links_->local();
  const int parity = static_cast<int>(call & 1);
  call_ = call;
  parted_ = rail_payload_ && static_cast<bool>(d.payload_part);
  Verdict v;
  if (!d.error.empty()) v = {d.error_code, c.topo().world_rank(), false, d.error};
  if (!call_refusal().empty())  // the caller's words, not its placeholder arguments
    v = {Errc::kInvalidArgument, c.topo().world_rank(), false,
         fmt::format("{}: rank {} refused its own arguments of this call: {}", op_,
                     c.topo().world_rank(), call_refusal())};
  if (rail_ != nullptr) {
    rail_->prepare(rail_record_bytes());
    // With one rank per host the payload leaves with the descriptor.
    std::size_t payload_len = 0;
    if (rail_payload_ && d.payload) {
      write_payload(d, rail_record(links_->host()) + rail_head_bytes(), v);
      payload_len = d.payload_len > 0 ? std::min(d.payload_len, payload_bytes_) : payload_bytes_;
      if (parted_ && v.origin < 0) check_parts(d, payload_len, v);
    }
    rail_step(call, d, payload_len, v);
  } else if (vlen_ > 0) {
    auto* area = reinterpret_cast<int64_t*>(vectors_.at(me, parity));
    if (d.vector != nullptr)
      std::memcpy(area, d.vector, sizeof(int64_t) * vlen_);
    else
      std::fill(area, area + vlen_, int64_t{0});
  }

  // The payload: a peer last read this parity's slot in call - 2, and was done with it before it
  // published call - 1, which our previous exchange saw: the slot is free to overwrite.
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
  const auto deadline = c.runtime().deadline();
  for (int peer : links_->host_ring()) {
    const int q = links_->link(peer).local;
    uint64_t observed = 0;
    if (!shm::signal_wait(header_.at(q, parity), call, deadline, c.runtime().wait_policy(),
                          &observed)) {
      // Our published descriptor (and payload) of this call now says that we gave it up, so a
      // late peer fails too instead of completing with a rank whose op is broken.
      const std::string gone = fmt::format(
          "{}: rank {} timed out waiting for rank {} in the call handshake of call {} "
          "and gave the call up; the op must be destroyed",
          op_, c.topo().world_rank(), peer, call);
      std::snprintf(own.message, kMessage, "%s", gone.c_str());
      own.origin = c.topo().world_rank();
      std::atomic_thread_fence(std::memory_order_release);
      __atomic_store_n(&own.code, static_cast<int64_t>(Errc::kTimeout), __ATOMIC_RELEASE);
      raise_timeout(c, *links_, op_, peer, header_.label(parity), call, observed);
    }
    check_peer(call, d.fields, info(q, parity), peer, v);
  }
  if (v.origin < 0) return;
  mismatched_ = mismatched_ || v.mismatch;
  if (v.origin == c.topo().world_rank()) throw Error(v.code, v.message);
  throw Error(v.code, fmt::format("{} (reported by rank {})", v.message, v.origin));
}

}  // namespace fluxcpp::ops
