#include "ops/core/all_reduce_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/reduce.hpp"
#include "kernels/stream_copy.hpp"
#include "ops/core/stream_output.hpp"

namespace fluxcpp::ops {

namespace {
// Elements of a chunk: an equal share, rounded up to whole cache lines of every dtype.
int64_t chunk_of(int64_t count, int L) {
  constexpr int64_t kAlign = 64;
  return ((count + L - 1) / L + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

AllReduceExchange::AllReduceExchange(const comm::Parts& c, const Links& links, shm::Layout& layout,
                                     int64_t max_count, DType in, DType out)
    : c_(&c),
      links_(&links),
      in_(in),
      out_(out),
      acc_(in == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32),
      in_size_(dtype_size(in)),
      out_size_(dtype_size(out)),
      acc_size_(dtype_size(acc_)),
      max_count_(max_count) {
  const int L = links.host_size(), N = links.hosts();
  part_ = L == 1 ? in_ : acc_;
  part_size_ = dtype_size(part_);
  const auto max_chunk = static_cast<std::size_t>(chunk_of(max_count, L));
  one_shot_max_ = latency_payload_bytes(links, static_cast<std::size_t>(max_count) * in_size_,
                                        /*across_hosts=*/true);
  // The input slot always exists: it is also the zero-copy input buffer.
  inputs_ = layout.slots("ar-input", 1, static_cast<std::size_t>(max_count) * in_size_);
  input_ready_ = layout.signals("ar-input-ready", L);
  results_ = layout.slots("ar-result", L > 1 ? 1 : 0, max_chunk * out_size_);
  result_ready_ = layout.signals("ar-result-ready", 1);
  if (N > 1) partials_ = GatherExchange(c, links, layout, max_chunk * part_size_, /*needed=*/true);
}

char* AllReduceExchange::input_slot() const {
  return inputs_.at(links_->local());
}

Outbox AllReduceExchange::input_chunk(int q) const {
  const int me = links_->local();
  return Outbox(core_, inputs_.at(me) + chunk_begin(q) * in_size_, chunk_len(q) * in_size_,
                &input_ready_.at(me, q), input_base_);
}

Inbox AllReduceExchange::input_of(int p, int q) const {
  return Inbox(core_, links_->member(p), inputs_.at(p) + chunk_begin(q) * in_size_,
               chunk_len(q) * in_size_, &input_ready_.at(p, q), input_base_, &input_ready_, q, p);
}

Outbox AllReduceExchange::result() const {
  const int me = links_->local();
  return Outbox(core_, results_.at(me), chunk_len(me) * out_size_, &result_ready_.at(me), result_base_);
}

Inbox AllReduceExchange::result_of(int p) const {
  return Inbox(core_, links_->member(p), results_.at(p), chunk_len(p) * out_size_,
               &result_ready_.at(p), result_base_, &result_ready_, 0, p);
}

int64_t AllReduceExchange::piece() const {
  return std::max<int64_t>(1024, c_->runtime().config().chunk_bytes / static_cast<long>(in_size_));
}

bool AllReduceExchange::streams() const {
  return links_->host_size() == 1 && links_->networked();
}

void AllReduceExchange::run(OpCore& core, const char* input, bool staged, int64_t count,
                            char* output, const Producer& produce) {
  const int L = links_->host_size(), N = links_->hosts(), me = links_->local();
  core_ = &core;
  count_ = count;
  chunk_ = chunk_of(count, L);
  step_ = piece();
  stream_ = streams_output(count);
  input_base_ = input_tally_.begin(static_cast<std::size_t>(chunk_) * in_size_);
  result_base_ = result_tally_.begin(static_cast<std::size_t>(chunk_) * out_size_);
  // The latency path: every rank's input came with the handshake's payload; sum it here.
  if (one_shot(count)) return sum_payloads(output);
  // One rank per host across hosts (streams()): a produced input goes out in messages of one
  // summed piece, each sent as it is produced; otherwise it is produced whole first.
  const bool stream = produce && streams();
  if (N > 1)
    partials_.begin(core, static_cast<std::size_t>(chunk_) * part_size_,
                    stream ? static_cast<std::size_t>(step_) * part_size_ : 0);
  if (produce && !stream) produce(count);
  if (L > 1) stage(input, staged);
  const int64_t b = chunk_begin(me);
  // With host peers our chunk's result goes to the result slot they read, and each summed piece
  // on into the output while it is still in the cache.
  sum_chunk(input, L > 1 ? results_.at(me) : output + b * out_size_,
            L > 1 ? output + b * out_size_ : nullptr, stream ? produce : Producer());
  if (L == 1) return;
  // The host peers' chunks as they are published.
  for (int i = 1; i < L; ++i) {
    const int p = (me + i) % L;
    result_of(p).drain(output + chunk_begin(p) * out_size_, 0, chunk_len(p) * out_size_, stream_);
  }
}

// The output in non-temporal stores when the call's working set on the host (every host rank's
// input, input slot and output, and the results) cannot stay in the last-level cache: the output
// would be evicted before the caller reads it, and ordinary stores read every line first (at
// 16 MiB per rank, W = 2: 2.35 -> 2.05 ms; at 4 MiB, where it fits, streaming was 10 % slower).
bool AllReduceExchange::streams_output(int64_t count) const {
  const auto n = static_cast<std::size_t>(count);
  return stream_output(*c_, static_cast<std::size_t>(links_->host_size()) * n *
                                    (2 * in_size_ + out_size_) +
                                n * out_size_);
}

// This rank's input into its slot, the chunk its next host peer sums first (ring order, so every
// reducer finds its chunk early); not its own chunk, which it reads from its input.
void AllReduceExchange::stage(const char* input, bool staged) {
  const int L = links_->host_size(), me = links_->local();
  const std::size_t step = static_cast<std::size_t>(c_->runtime().config().chunk_bytes);
  for (int i = 1; i <= L; ++i) {
    const int q = (me + i) % L;
    const Outbox out = input_chunk(q);
    if (staged) {
      out.publish_all();
    } else if (q != me) {
      out.write(input + chunk_begin(q) * in_size_, out.bytes(), step);
      if (out.bytes() == 0) out.publish_all();
    }
  }
}

// Every rank's input (ours too) arrived with the handshake: the host ranks' on one host, the
// hosts' with one rank each (the order of the two-level sum, as either level has one term).
void AllReduceExchange::sum_payloads(char* output) {
  const Links& l = *links_;
  std::vector<const void*> srcs;
  for (int n = 0; n < l.hosts(); ++n)
    for (int q = 0; q < l.host_size(n); ++q)
      srcs.push_back(core_->handshake().payload_of(l.rank_of(n, q)));
  core_->skip_release();  // no rank read a peer's input slot
  kernels::reduce_sum(in_, srcs.data(), static_cast<int>(srcs.size()), out_, output, count_);
}

void AllReduceExchange::copy_piece(const char* from, char* to, int64_t e0, int64_t e1) const {
  if (stream_)
    kernels::stream_copy(to + e0 * out_size_, from + e0 * out_size_,
                         static_cast<std::size_t>(e1 - e0) * out_size_);
  else
    std::memcpy(to + e0 * out_size_, from + e0 * out_size_,
                static_cast<std::size_t>(e1 - e0) * out_size_);
}

void AllReduceExchange::sum_chunk(const char* input, char* dst, char* copy,
                                  const Producer& produce) {
  const int L = links_->host_size(), N = links_->hosts(), me = links_->local();
  const int nid = links_->host();
  const int64_t b = chunk_begin(me), len = chunk_len(me);
  const Outbox res = L > 1 ? result() : Outbox();
  std::vector<const void*> srcs(L), hosts(N);
  std::vector<Inbox> peers(L);
  for (int p = 0; p < L; ++p)
    if (p != me) peers[p] = input_of(p, me);
  // Within the host, piece by piece as the peers publish: the result, or this host's sum (in the
  // accumulation type) that leaves for the other hosts while the next piece is summed.
  const Outbox partial = N > 1 ? partials_.own() : Outbox();
  for (int64_t e0 = 0; e0 < len; e0 += step_) {
    const int64_t e1 = std::min(len, e0 + step_);
    if (produce) produce(b + e1);
    for (int p = 0; p < L; ++p) {
      if (p == me) {
        srcs[p] = input + (b + e0) * in_size_;
        continue;
      }
      peers[p].wait(static_cast<std::size_t>(e1) * in_size_);
      srcs[p] = peers[p].data() + e0 * in_size_;
    }
    if (N == 1) {
      kernels::reduce_sum(in_, srcs.data(), L, out_, dst + e0 * out_size_, e1 - e0);
      res.publish(static_cast<std::size_t>(e1) * out_size_);
      if (copy != nullptr) copy_piece(dst, copy, e0, e1);
    } else {
      // Alone on the host (part_ is in_): the input piece as it is; else the host's sum.
      if (L == 1)
        std::memcpy(partial.data() + e0 * part_size_, srcs[0],
                    static_cast<std::size_t>(e1 - e0) * part_size_);
      else
        kernels::reduce_sum(in_, srcs.data(), L, acc_, partial.data() + e0 * acc_size_, e1 - e0);
      partial.publish(static_cast<std::size_t>(e1) * part_size_);  // (drives the transport)
    }
  }
  if (N == 1) {
    res.publish_all();
    return;
  }
  partial.publish_all();  // the padding after a short chunk too: every block has the same size
  // The hosts' sums in host order, piece by piece as they land.
  std::vector<Inbox> remote(N);
  for (int n = 0; n < N; ++n)
    if (n != nid) remote[n] = partials_.from(links_->rail(n));
  for (int64_t e0 = 0; e0 < len; e0 += step_) {
    const int64_t e1 = std::min(len, e0 + step_);
    for (int n = 0; n < N; ++n) {
      if (n == nid) {
        hosts[n] = partial.data() + e0 * part_size_;
        continue;
      }
      remote[n].wait(static_cast<std::size_t>(e1) * part_size_);
      hosts[n] = remote[n].data() + e0 * part_size_;
    }
    // In f32 (f64) whatever part_ is, rounded once: a bf16 input widened here is the f32 sum
    // its host would have sent.
    kernels::reduce_sum(part_, hosts.data(), N, out_, dst + e0 * out_size_, e1 - e0);
    if (L > 1) res.publish(static_cast<std::size_t>(e1) * out_size_);
    if (copy != nullptr) copy_piece(dst, copy, e0, e1);
  }
  if (L > 1) res.publish_all();
}

}  // namespace fluxcpp::ops
