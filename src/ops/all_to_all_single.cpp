#include "ops/all_to_all_single.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/options.hpp"
#include "ops/core/stream_output.hpp"

namespace fluxcpp {
namespace detail {

void AllToAllSingleImpl::create(const comm::Parts& c, const std::string& local_error) {
  const AllToAllSingleOptions o = opts_;
  row_ = ops::agree_row_options(c, kOp, local_error, o.dtype, "n", o.n, "max_rows", o.max_rows);
  const std::size_t max_bytes = static_cast<std::size_t>(o.max_rows) * row_;
  a2a_ = ops::A2aExchange(links_, layout_, max_bytes, max_bytes, /*needed=*/true);
  single_copy_ = ops::SingleCopy(c, links_, layout_);
  // The handshake vector: input_splits, then output_splits.
  // Across hosts of one rank each, a small input rides on the handshake's rail records whole.
  const std::size_t payload =
      links_.networked() ? ops::latency_payload_bytes(links_, max_bytes, /*across_hosts=*/true) : 0;
  make_core(ops::OpCore::Spec::of(kOp)
                .with_vector(2 * c.topo().world_size())
                .releasing()
                .with_payload(payload));
  single_copy_.probe(*core_);
}

std::string AllToAllSingleImpl::validate(const void* input, const int64_t* in_splits,
                                         const void* output, const int64_t* out_splits) const {
  const int W = ctx_->topo().world_size(), r = ctx_->topo().world_rank();
  const char* names[2] = {"input_splits", "output_splits"};
  const int64_t* splits[2] = {in_splits, out_splits};
  const void* bufs[2] = {input, output};
  const char* buf_names[2] = {"input", "output"};
  for (int i = 0; i < 2; ++i) {
    if (splits[i] == nullptr) return fmt::format("{}: {} is NULL (rank {})", kOp, names[i], r);
    int64_t sum = 0;
    for (int t = 0; t < W; ++t) {
      if (splits[i][t] < 0 || splits[i][t] > opts_.max_rows)
        return fmt::format("{}: {}[{}]={} must be in [0, max_rows={}] (rank {})", kOp, names[i], t,
                           splits[i][t], opts_.max_rows, r);
      sum += splits[i][t];
    }
    if (sum > opts_.max_rows)
      return fmt::format("{}: the {} add up to {} rows, more than max_rows={} (rank {})", kOp,
                         names[i], sum, opts_.max_rows, r);
    if (sum > 0 && bufs[i] == nullptr)
      return fmt::format("{}: {} is NULL with {} rows (rank {})", kOp, buf_names[i], sum, r);
  }
  return {};
}

std::string AllToAllSingleImpl::check_splits() const {
  const int W = ctx_->topo().world_size();
  // Every rank checks every pair in the same order, so all of them report the same mismatch.
  for (int s = 0; s < W; ++s)
    for (int t = 0; t < W; ++t) {
      const int64_t sent = input_splits_of(s)[t], expected = output_splits_of(t)[s];
      if (sent != expected)
        return fmt::format(
            "{}: splits do not match: rank {} sends {} rows to rank {} (input_splits[{}]) but "
            "rank {} expects {} rows from rank {} (output_splits[{}]) (reported by rank {})",
            kOp, s, sent, t, t, t, expected, s, s, ctx_->topo().world_rank());
    }
  return {};
}

void AllToAllSingleImpl::forward(const void* input, const int64_t* input_splits, void* output,
                                 const int64_t* output_splits) {
  const int W = ctx_->topo().world_size();
  ops::CallDescriptor d;
  d.error = validate(input, input_splits, output, output_splits);
  // The agreed vector: input_splits then output_splits (zeros when unusable).
  std::vector<int64_t> mine(2 * static_cast<std::size_t>(W), 0);
  int64_t in_rows = 0, out_rows = 0;
  if (d.error.empty()) {
    std::copy(input_splits, input_splits + W, mine.begin());
    std::copy(output_splits, output_splits + W, mine.begin() + W);
    for (int t = 0; t < W; ++t) {
      in_rows += input_splits[t];
      out_rows += output_splits[t];
    }
  }
  const bool zero_copy =
      zero_copy_.check(*core_, a2a_.out_slot(), input, static_cast<std::size_t>(in_rows) * row_,
                       {{output, static_cast<std::size_t>(out_rows) * row_}}, d);
  d.vector = mine.data();
  // Host peers read our input straight from our address space (single copy), or, when it is the
  // zero-copy buffer, from our segment: 0 says so.
  d.word = zero_copy ? 0 : reinterpret_cast<uintptr_t>(input);
  d.agreed_check = [&] { return check_splits(); };
  // Small enough to ride on the handshake: the payload is sent whatever the others' sizes; the
  // call then takes it if every rank's input fits (run(), from the agreed splits).
  const std::size_t in_bytes = static_cast<std::size_t>(in_rows) * row_;
  if (d.error.empty() && in_bytes > 0 && in_bytes <= core_->handshake().payload_bytes()) {
    d.payload = [input, in_bytes](char* slot) { std::memcpy(slot, input, in_bytes); };
    d.payload_len = in_bytes;
  }
  // Across hosts each rank receives only its block of a payload. Set on every rank, with a
  // payload or not, so that every rank reads the payloads as parts (Handshake::payload_parted).
  d.payload_part = [this, input_splits](int g) {
    int64_t before = 0;
    for (int u = 0; u < g; ++u) before += input_splits[u];
    return std::pair<std::size_t, std::size_t>(static_cast<std::size_t>(before) * row_,
                                               static_cast<std::size_t>(input_splits[g]) * row_);
  };
  core_->run(ops::Path::kFused, d, /*noop=*/false, [&](const ops::Call&) {
    run(static_cast<const char*>(input), zero_copy, static_cast<char*>(output));
  });
}

bool AllToAllSingleImpl::rides_on_handshake() const {
  const std::size_t room = core_->handshake().payload_bytes();
  if (room == 0) return false;
  const int W = ctx_->topo().world_size();
  for (int s = 0; s < W; ++s) {
    int64_t rows = 0;
    for (int t = 0; t < W; ++t) rows += input_splits_of(s)[t];
    if (static_cast<std::size_t>(rows) * row_ > room) return false;
  }
  return true;
}

void AllToAllSingleImpl::run(const char* input, bool zero_copy, char* output) {
  const ops::Handshake& hs = core_->handshake();
  const int r = ctx_->topo().world_rank();
  auto rows = [&](int s, int t) { return input_splits_of(s)[t]; };
  // Byte offset of rank s's block for rank t in s's input, and of s's rows in t's output.
  auto in_off = [&](int s, int t) {
    int64_t o = 0;
    for (int u = 0; u < t; ++u) o += rows(s, u);
    return static_cast<std::size_t>(o) * row_;
  };
  auto out_off = [&](int t, int s) {
    int64_t o = 0;
    for (int u = 0; u < s; ++u) o += rows(u, t);
    return static_cast<std::size_t>(o) * row_;
  };
  auto bytes = [&](int s, int t) { return static_cast<std::size_t>(rows(s, t)) * row_; };
  if (rides_on_handshake()) {  // every rank's input came whole with its descriptor
    for (int s = 0; s < ctx_->topo().world_size(); ++s) {
      // Another host's payload is its block for us alone (payload_parted), else its whole input.
      const char* from = s == r ? input + in_off(s, r)
                                : hs.payload_of(s) + (hs.payload_parted() ? 0 : in_off(s, r));
      if (bytes(s, r) > 0) std::memcpy(output + out_off(r, s), from, bytes(s, r));
    }
    return;
  }
  // Our staged input mirrors the input's layout; other hosts' rows land at our output offsets.
  // Host peers may read our blocks straight from our input (single copy: the exchange decides
  // from the block sizes and the copy engine), or, when it is the zero-copy buffer, from our
  // segment: the handshake word says which (0: the segment).
  // Other hosts' blocks leave from our input and land in our output, unstaged, when the two do
  // not overlap (the in slot's offsets are the output's).
  const int W = ctx_->topo().world_size();
  std::size_t out_bytes = 0;
  for (int s = 0; s < W; ++s) out_bytes += bytes(s, r);
  const std::size_t in_bytes = in_off(r, W);
  const bool direct = !ops::overlaps(input, in_bytes, output, out_bytes);
  a2a_.begin(*core_, {bytes, in_off, [&](int s) { return out_off(r, s); }},
             {&single_copy_, [&](int q) { return hs.word(q); }},
             direct ? ops::A2aExchange::Direct{input, output} : ops::A2aExchange::Direct{});

  // 1. Publish every block: other hosts' first, step by step as it is staged, so that the
  // transport sends the first message while the rest is copied; then the host peers' in ring
  // order (none to stage when they read our input themselves).
  const std::size_t step = static_cast<std::size_t>(ctx_->runtime().config().chunk_bytes);
  for (int t : a2a_.targets()) {
    const ops::Outbox box = a2a_.to(t);
    if (!zero_copy && box.bytes() > 0) box.write(input + in_off(r, t), box.bytes(), step);
    box.publish_all();
  }
  // 2. Our own rows.
  if (bytes(r, r) > 0) std::memcpy(output + out_off(r, r), input + in_off(r, r), bytes(r, r));
  // 3. Every peer's rows into place as they land: the host's first (peer r-i staged ours at its
  // step i), then other hosts' (received at their output offsets in our in slot).
  // The output around the cache when the host ranks' inputs, staged blocks and outputs exceed it.
  const std::size_t per_rank = std::max(out_bytes, in_bytes);
  const bool stream =
      ops::stream_output(*ctx_, static_cast<std::size_t>(links_.host_size()) * 3 * per_rank);
  a2a_.receive([&](const ops::Inbox& in) {
    in.drain(output + out_off(r, in.peer()), 0, in.bytes(), stream);
  });
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(AllToAllSingle, AllToAllSingleOptions);
FLUXCPP_PUBLIC_INPUT_BUFFER(AllToAllSingle)

void AllToAllSingle::forward(const void* input, const int64_t* input_splits, void* output,
                             const int64_t* output_splits) {
  ops::checked(impl_).forward(input, input_splits, output, output_splits);
}

}  // namespace fluxcpp
