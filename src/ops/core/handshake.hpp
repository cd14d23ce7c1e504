// The per-call handshake of a collective op. Before any data moves, every rank publishes its call
// descriptor — its identity (which op, which call), up to four shape fields, whether its own
// arguments were valid, one private word, and optionally a vector of counts (per-peer splits,
// per-expert token counts) — and reads everyone else's. That turns "rank 2 passed a null
// pointer", "ranks passed different m" or "rank 1 skipped a call after a timeout" into the same
// error on every rank instead of a hang or a silent pairing of different calls. Because a rank
// publishes call e only after finishing call e-1, it is also the proof that every peer is done
// with the buffers of the previous call.
//
// Within a host it costs one cache line per peer (headers in the op's segment, double-buffered by
// call parity); across hosts a small point-to-point exchange among the rail peers (the ranks with
// the same local rank on every host), whose result each rank republishes on its host, so the
// whole world agrees after one hop of each kind. Vectors travel the same two hops: after a call's
// handshake every rank can read every rank's vector. Payloads (the latency path's data) ride on
// the host's round, or, with one rank per host, in the rail records (only the call's bytes).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/parts.hpp"
#include "comm/record_swap.hpp"
#include "fluxcpp/error.hpp"
#include "ops/core/links.hpp"
#include "shm/layout.hpp"

namespace fluxcpp::ops {

inline constexpr int kCallFields = 4;
// The field name of an optional input whose presence every rank must agree on (1 given, 0 NULL).
inline constexpr const char* kBiasField = "bias (1: given, 0: NULL)";
using CallFields = std::array<int64_t, kCallFields>;

// What one rank brings to a call.
struct CallDescriptor {
  CallFields fields{};
  std::string error;                         // this rank's problem with its arguments, or ""
  Errc error_code = Errc::kInvalidArgument;  // kInvalidArgument, or kInvalidUsage for misuse
  uint64_t word = 0;                         // published as is (e.g. an input address)
  const int64_t* vector = nullptr;           // vector_len values, or null for zeros
  // Writes this rank's payload (at most the op's payload_bytes) into its slot for the call, which
  // the handshake then publishes with the descriptor: data that rides on the handshake's signal
  // round (the latency path of small calls). Called only when this rank's arguments are valid.
  std::function<void(char* slot)> payload;
  std::size_t payload_len = 0;  // the bytes `payload` writes (0: the op's whole payload room)
  // Across hosts of one rank each (the payload rides in the rail records): the part of the
  // payload that world rank g reads, {offset, length} within the payload_len bytes. Set, each
  // other host receives only its part (an all-to-all's block, a reduce-scatter's share), and
  // payload_of(g) of a rank on another host is the part meant for this rank
  // (Handshake::payload_parted()); unset, every host receives the whole payload. Every rank of a
  // call that succeeds must set it or none (it decides how every rank reads the others'
  // payloads), whether or not it writes a payload itself; it is called only when this rank does.
  // (A rank whose arguments fail may leave it unset: the call then fails on every rank.)
  std::function<std::pair<std::size_t, std::size_t>(int world_rank)> payload_part;
  // Run on every rank after a successful handshake, on data every rank shares (the agreed
  // vectors): returns "" or the kInvalidArgument message (the same on every rank, by
  // construction; it leaves the op usable).
  std::function<std::string()> agreed_check;
};

class Handshake {
 public:
  Handshake() = default;
  // Declares the handshake's regions in `layout` (before the segment is allocated) and, across
  // hosts, duplicates the rail communicator (collective). `names` label the fields in messages.
  // `serial` identifies the op among the context's ops (the same on every rank).
  // `payload_bytes`: room for a payload per rank and call parity (0: none).
  // `links` (the op's table) must outlive the handshake.
  Handshake(const comm::Parts& c, const Links& links, const char* op, uint64_t serial,
            shm::Layout& layout, std::array<const char*, kCallFields> names, int vector_len,
            std::size_t payload_bytes = 0);
  // The same with a table of its own, built from the context (a handshake outside an op).
  Handshake(const comm::Parts& c, const char* op, uint64_t serial, shm::Layout& layout,
            std::array<const char*, kCallFields> names, int vector_len,
            std::size_t payload_bytes = 0);

  // Collective over the context. Throws the same Error on every rank when a rank's descriptor
  // carries an error (its code), fields differ (kInvalidArgument) or call identities differ
  // (kInvalidUsage, and mismatched() becomes true: the op must not be used again); kTimeout
  // naming a peer that did not arrive.
  void exchange(uint64_t call, const CallDescriptor& d);
  bool mismatched() const { return mismatched_; }

  // Of the current call (valid until this rank's next exchange): the word of this host's rank
  // with local rank `local`, and any world rank's vector (vector_len values).
  uint64_t word(int local) const;
  const int64_t* vector(int world_rank) const;
  // Local rank `local`'s payload of the current call (written by CallDescriptor::payload), and the
  // room for one. Across hosts (one rank per host only: latency_payload_bytes) the payloads
  // travel in the rail records; payload_of(g) reads any world rank's, on one host or across.
  const char* payload(int local) const;
  const char* payload_of(int world_rank) const;
  // Whether the current call's payloads from other hosts are parts (CallDescriptor::payload_part):
  // payload_of(g) of a rank g on another host then starts at the part meant for this rank.
  bool payload_parted() const { return parted_; }
  std::size_t payload_bytes() const { return payload_bytes_; }

 private:
  struct Verdict {
    Errc code = Errc::kInvalidArgument;
    int origin = -1;  // world rank that found the problem; -1: none
    bool mismatch = false;
    std::string message;
    void merge(const Verdict& o);
  };
  struct Info;  // one rank's published descriptor (call-info slot)
  Info& info(int local, int parity) const;
  void rail_step(uint64_t call, const CallDescriptor& d, std::size_t payload_len, Verdict& v);
  std::size_t rail_head_bytes() const;
  std::size_t rail_record_bytes() const;
  char* rail_record(int node) const;
  void write_payload(const CallDescriptor& d, char* slot, Verdict& v) const;
  void check_parts(const CallDescriptor& d, std::size_t payload_len, Verdict& v) const;
  void part_payload(const CallDescriptor& d, comm::RecordSwap::Sends& sends) const;
  void check_peer(uint64_t call, const CallFields& fields, const Info& p, int peer, Verdict& v);

  Handshake(const comm::Parts& c, std::shared_ptr<const Links> own, const char* op, uint64_t serial,
            shm::Layout& layout, std::array<const char*, kCallFields> names, int vector_len,
            std::size_t payload_bytes);

  const comm::Parts* ctx_ = nullptr;
  const Links* links_ = nullptr;
  std::shared_ptr<const Links> own_links_;  // the table of a handshake outside an op
  const char* op_ = "";
  uint64_t serial_ = 0;
  std::array<const char*, kCallFields> names_{};
  int vlen_ = 0;
  std::size_t payload_bytes_ = 0;
  uint64_t call_ = 0;
  bool mismatched_ = false;
  shm::SignalArray header_;  // [2] by call parity: the call number, once Info is written
  shm::SlotArray info_;      // [2] by call parity
  shm::SlotArray vectors_;   // [2] by parity: [hosts][vector_len], rank (n, me)'s vector at n
  shm::SlotArray payloads_;  // [2] by parity
  // The rail peers' records (one per host), kept across calls; null on one host.
  std::unique_ptr<comm::RecordSwap> rail_;
  bool rail_payload_ = false;  // payloads travel on the rail (one rank per host)
  bool parted_ = false;        // the current call's payloads travel in parts
};

// "op: timed out after T s waiting for rank R (host H, local rank L) on WHAT: expected >= X,
// observed Y (this is rank M)", as an Error(kTimeout).
[[noreturn]] void raise_timeout(const comm::Parts& ctx, const Links& links, const char* op,
                                int peer, const std::string& what, uint64_t expected,
                                uint64_t observed);

}  // namespace fluxcpp::ops
