// The all-reduce pattern, shared by AllReduce and GemmAR: the sum over ranks of every rank's
// `count` elements, in a fixed order that depends only on the world size and the placement.
// Within a host the elements are cut into L chunks; local rank q sums chunk q: it reads the host
// peers' chunk q in their "ar-input" slots as it is published (a signal per chunk, so the
// reducer of each chunk starts on it while the owner stages the next), sums the host ranks in
// local-rank order, and puts the result in its "ar-result" slot, from which the host peers copy
// it. Across hosts the host's sum of chunk q (in the accumulation type) travels between rail
// peers (a GatherExchange) while it is computed, and local rank q adds the hosts' sums in host
// order, rounding once. Small inputs on one host take one signal round instead (every rank sums
// every peer's whole input, in the same order): the same bits either way.
//
// Element i's result: round(Σ_n (Σ_q x[n][q][i] in acc) in acc), hosts n and local ranks q in
// index order; acc is f64 for f64 and f32 otherwise.
#pragma once

#include <cstdint>

#include "fluxcpp/types.hpp"
#include "ops/core/gather_exchange.hpp"
#include "ops/core/mailbox.hpp"

namespace fluxcpp::ops {

class AllReduceExchange {
 public:
  // Inputs of at most this many bytes on one host take the one-shot path.
  static constexpr std::size_t kOneShotMaxBytes = 64 << 10;

  AllReduceExchange() = default;
  // Declares the regions before the core allocates: inputs of up to max_count elements of
  // `in`, results in `out`.
  AllReduceExchange(detail::ContextImpl& c, shm::Layout& layout, int64_t max_count, DType in,
                    DType out);

  // This rank's input slot (the zero-copy input buffer): room for max_count elements.
  char* input_slot() const;

  // The whole call: output (count elements of `out`) = the sum over ranks of their inputs.
  // `staged`: this rank's input is already in input_slot() (zero-copy, or written there by the
  // op's GEMM). input == output is allowed (the input is staged before any output is written).
  void run(OpCore& core, const char* input, bool staged, int64_t count, char* output);

 private:
  int64_t chunk_begin(int q) const { return std::min(count_, chunk_ * q); }
  int64_t chunk_len(int q) const { return chunk_begin(q + 1) - chunk_begin(q); }
  Outbox input_chunk(int q) const;     // chunk q of this rank's input slot
  Inbox input_of(int p, int q) const;  // chunk q of host rank p's input
  Outbox result() const;
  Inbox result_of(int p) const;
  void stage(const char* input, bool staged, bool all);
  void one_shot(const char* own, char* output);
  // This rank's chunk, summed over the host (and over the hosts) into dst.
  void sum_chunk(const char* input, char* dst);

  detail::ContextImpl* c_ = nullptr;
  OpCore* core_ = nullptr;
  DType in_ = DType::kFloat32, out_ = DType::kFloat32, acc_ = DType::kFloat32;
  std::size_t in_size_ = 0, out_size_ = 0, acc_size_ = 0;
  int64_t max_count_ = 0, count_ = 0, chunk_ = 0, step_ = 0;
  shm::SlotArray inputs_, results_;
  shm::SignalArray input_ready_;   // [L] by chunk
  shm::SignalArray result_ready_;  // [1]
  Tally input_tally_, result_tally_;
  uint64_t input_base_ = 0, result_base_ = 0;
  GatherExchange partials_;  // across hosts: each host's sum of each chunk
};

}  // namespace fluxcpp::ops
