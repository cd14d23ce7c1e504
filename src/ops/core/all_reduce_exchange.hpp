// The all-reduce pattern, shared by AllReduce and GemmAR: the sum over ranks of every rank's
// `count` elements, in a fixed order that depends only on the world size and the placement.
// Within a host the elements are cut into L chunks; local rank q sums chunk q: it reads the host
// peers' chunk q in their "ar-input" slots as it is published (a signal per chunk, so the
// reducer of each chunk starts on it while the owner stages the next), sums the host ranks in
// local-rank order, and puts the result in its "ar-result" slot, from which the host peers copy
// it. Across hosts the host's sum of chunk q (in the accumulation type) travels between rail
// peers (a GatherExchange) while it is computed, and local rank q adds the hosts' sums in host
// order, rounding once. Small inputs on one host, or across hosts of one rank each, take the
// latency path instead: each rank's input rides on the call's handshake (a payload published with
// the call descriptor, one signal round on a host, the descriptors' exchange between hosts), and
// every rank sums every rank's payload in the same order: the same bits.
//
// Element i's result: round(Σ_n (Σ_q x[n][q][i] in acc) in acc), hosts n and local ranks q in
// index order; acc is f64 for f64 and f32 otherwise.
#pragma once

#include <cstdint>
#include <functional>

#include "fluxcpp/types.hpp"
#include "ops/core/gather_exchange.hpp"
#include "ops/core/mailbox.hpp"

namespace fluxcpp::ops {

class AllReduceExchange {
 public:
  AllReduceExchange() = default;
  // Declares the regions before the core allocates: inputs of up to max_count elements of
  // `in`, results in `out`.
  // `links` must outlive the exchange (the op's table).
  AllReduceExchange(const comm::Parts& c, const Links& links, shm::Layout& layout,
                    int64_t max_count, DType in, DType out);

  // This rank's input slot (the zero-copy input buffer): room for max_count elements.
  char* input_slot() const;

  // The latency path: the handshake payload the op's core must have room for (OpCore::Spec::
  // with_payload), and whether a call of `count` elements takes it. Then the op's descriptor
  // carries the input as its payload (CallDescriptor::payload; the op's GEMM may write it there
  // directly) and run() sums every rank's payload.
  std::size_t payload_bytes() const { return one_shot_max_; }
  bool one_shot(int64_t count) const {
    return static_cast<std::size_t>(count) * in_size_ <= one_shot_max_;
  }

  // The whole call: output (count elements of `out`) = the sum over ranks of their inputs.
  // `staged`: this rank's input is already in input_slot() (zero-copy, or written there by the
  // op's GEMM). On the latency path (one_shot(count)) the input is the payload and `input` is not
  // read. input == output is allowed (the input is staged before any output is written).
  // `produce` (staged only; may be empty): writes the input into input_slot() in element order;
  // produce(e) returns once at least elements [0, e) are written (the op's GEMM, tile by tile).
  // Alone on its host with other hosts to reach (streams()), the rank lets each piece leave for
  // the other hosts as soon as it is produced, so the link runs while the rest is computed;
  // otherwise everything is produced first.
  using Producer = std::function<void(int64_t end)>;
  void run(OpCore& core, const char* input, bool staged, int64_t count, char* output,
           const Producer& produce = {});
  // Whether run() streams a producer's pieces to other hosts as they are produced (see run()).
  bool streams() const;
  // Elements summed (and, streaming, sent) at a time.
  int64_t piece() const;

 private:
  int64_t chunk_begin(int q) const { return std::min(count_, chunk_ * q); }
  int64_t chunk_len(int q) const { return chunk_begin(q + 1) - chunk_begin(q); }
  Outbox input_chunk(int q) const;     // chunk q of this rank's input slot
  Inbox input_of(int p, int q) const;  // chunk q of host rank p's input
  Outbox result() const;
  Inbox result_of(int p) const;
  void stage(const char* input, bool staged);
  void sum_payloads(char* output);
  // This rank's chunk, summed over the host (and over the hosts) into dst, each summed piece
  // then copied to `copy` too (null: none).
  void sum_chunk(const char* input, char* dst, char* copy, const Producer& produce);
  void copy_piece(const char* from, char* to, int64_t e0, int64_t e1) const;
  bool streams_output(int64_t count) const;

  const comm::Parts* c_ = nullptr;
  const Links* links_ = nullptr;
  OpCore* core_ = nullptr;
  DType in_ = DType::kFloat32, out_ = DType::kFloat32, acc_ = DType::kFloat32;
  // What a host sends the other hosts: its sum in the accumulation type, or, alone on its host,
  // its input as it is (bf16 half the bytes; widened on arrival, the same bits).
  DType part_ = DType::kFloat32;
  std::size_t in_size_ = 0, out_size_ = 0, acc_size_ = 0, part_size_ = 0, one_shot_max_ = 0;
  int64_t max_count_ = 0, count_ = 0, chunk_ = 0, step_ = 0;
  bool stream_ = false;  // this call's output in non-temporal stores (streams_output)
  shm::SlotArray inputs_, results_;
  shm::SignalArray input_ready_;   // [L] by chunk
  shm::SignalArray result_ready_;  // [1]
  Tally input_tally_, result_tally_;
  uint64_t input_base_ = 0, result_base_ = 0;
  GatherExchange partials_;  // across hosts: each host's sum of each chunk
};

}  // namespace fluxcpp::ops
