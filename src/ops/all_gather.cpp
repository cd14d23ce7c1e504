#include "ops/all_gather.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "error_util.hpp"
#include "kernels/stream_copy.hpp"
#include "ops/core/create.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/options.hpp"
#include "ops/core/stream_output.hpp"
#include "shm/cma.hpp"

namespace fluxcpp {
namespace detail {

void AllGatherImpl::create(const comm::Parts& c, const std::string& local_error) {
  const AllGatherOptions o = opts_;
  row_ = ops::agree_row_options(c, kOp, local_error, o.dtype, "k", o.k, "max_m", o.max_m);
  const std::size_t max_shard = static_cast<std::size_t>(o.max_m / c.topo().world_size()) * row_;
  // The staged slot always exists: it is also the zero-copy input buffer.
  gather_ = ops::GatherExchange(c, links_, layout_, max_shard, /*needed=*/true);
  single_copy_ = ops::SingleCopy(c, links_, layout_);
  // Small blocks travel in the handshake (kLatency): across hosts of one rank each in the rail
  // records, on one host in its payload slots (up to kHostLatencyBytes). The copies are those of
  // the staged path; what goes is the second meeting (the blocks' signals after the handshake's,
  // or the single copy's read receipts) and the release.
  std::size_t payload = ops::latency_payload_bytes(links_, max_shard, /*across_hosts=*/true);
  if (!links_.networked()) payload = std::min(payload, kHostLatencyBytes);
  make_core(ops::OpCore::Spec::of(kOp, {"m"}).releasing().with_payload(payload));
  single_copy_.probe(*core_);
}

void AllGatherImpl::forward(const void* input, int64_t m, void* output) {
  ops::CallDescriptor d;
  d.fields = {m, 0, 0, 0};
  d.error = ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"input", input}, {"output", output}});
  const std::size_t shard =
      d.error.empty() ? static_cast<std::size_t>(m / ctx_->topo().world_size()) * row_ : 0;
  const bool zero_copy =
      zero_copy_.check(*core_, gather_.staged_slot(), input, shard,
                       {{output, shard * static_cast<std::size_t>(ctx_->topo().world_size())}}, d);
  // Host peers read our input straight from our address space (single copy), or, when it is the
  // zero-copy buffer, from our segment: 0 says so.
  d.word = zero_copy ? 0 : reinterpret_cast<uintptr_t>(input);
  if (d.error.empty()) schedule_ = plan(m);
  if (d.error.empty() && schedule_ == Schedule::kLatency) {
    d.payload = [input, shard](char* slot) { std::memcpy(slot, input, shard); };
    d.payload_len = shard;
  }
  core_->run(ops::Path::kFused, d, m == 0, [&](const ops::Call&) {
    run(static_cast<const char*>(input), zero_copy, shard, static_cast<char*>(output));
  });
}

AllGatherImpl::Schedule AllGatherImpl::plan(int64_t m) const {
  const std::size_t shard = static_cast<std::size_t>(m / ctx_->topo().world_size()) * row_;
  if (shard > 0 && shard <= core_->handshake().payload_bytes()) return Schedule::kLatency;
  return single_copy_.worth(shard) ? Schedule::kSingleCopy : Schedule::kStaged;
}

void AllGatherImpl::run(const char* input, bool zero_copy, std::size_t shard, char* output) {
  if (schedule_ == Schedule::kLatency) {  // every rank's block came with its descriptor
    core_->skip_release();  // no rank read a peer's staged slot
    const int W = ctx_->topo().world_size();
    for (int g = 0; g < W; ++g) {
      // Ours from its payload copy too: an input that overlaps another rank's block of the output
      // is read before that block is written.
      const char* from = core_->handshake().payload_of(g);
      if (from != output + shard * g) std::memcpy(output + shard * g, from, shard);
    }
    return;
  }
  // Across hosts of one rank each, our block leaves from the input and the others' land in the
  // output (GatherExchange::Direct), unless the input overlaps another rank's block there.
  const std::size_t W = static_cast<std::size_t>(ctx_->topo().world_size());
  const char* own_out = output + shard * static_cast<std::size_t>(ctx_->topo().world_rank());
  if (input == own_out || !ops::overlaps(input, shard, output, shard * W))
    gather_.begin(*core_, shard, ops::GatherExchange::Direct{input, output});
  else
    gather_.begin(*core_, shard);
  // Other hosts receive our block from our segment: staged there first, unless it is there (or
  // it leaves from the input).
  const bool staged = zero_copy || gather_.stage_for_hosts(input, shard);
  if (zero_copy) gather_.own().publish_all();
  if (schedule_ == Schedule::kSingleCopy)
    gather_cma(input, zero_copy, shard, output);
  else
    gather_shm(input, staged, shard, output);
  // Blocks from other hosts, as they land in the segments of this host's ranks.
  gather_.drain_other_hosts(output, shard);
}

// Within the host, staged: publish our block chunk by chunk into our segment and pull each
// peer's chunk right after it lands, so reads hit blocks that are still in the shared cache.
// `staged`: our block is in the segment already (zero-copy input, or staged for the network).
void AllGatherImpl::gather_shm(const char* input, bool staged, std::size_t shard, char* output) {
  const comm::Parts& c = *ctx_;
  char* own_out = output + shard * c.topo().world_rank();
  const std::vector<ops::Inbox> peers = gather_.host_inboxes();
  if (peers.empty()) {  // alone on the host
    if (input != own_out) std::memcpy(own_out, input, shard);
    return;
  }
  const std::size_t chunk = static_cast<std::size_t>(c.runtime().config().chunk_bytes);
  const ops::Outbox own = gather_.own();
  // The output around the cache when the host ranks' inputs, staged blocks and outputs (of W
  // blocks each) exceed it.
  const std::size_t W = static_cast<std::size_t>(c.topo().world_size());
  const bool stream = ops::stream_output(c, (peers.size() + 1) * shard * (W + 2));
  auto put = [stream](char* to, const char* from, std::size_t len) {
    if (stream)
      kernels::stream_copy(to, from, len);
    else
      std::memcpy(to, from, len);
  };
  auto pull = [&](std::size_t off) {
    const std::size_t len = std::min(chunk, shard - off);
    for (const ops::Inbox& in : peers) {
      in.wait(off + len);
      put(output + shard * in.peer() + off, in.data() + off, len);
    }
  };
  for (std::size_t off = 0; off < shard; off += chunk) {
    const std::size_t len = std::min(chunk, shard - off);
    if (!staged) {
      std::memcpy(own.data() + off, input + off, len);
      own.publish(off + len);
    }
    if (input != own_out) put(own_out + off, input + off, len);
    if (off > 0) pull(off - chunk);
  }
  pull((shard - 1) / chunk * chunk);
}

// Within the host, single copy: read each peer's input straight from its address space into our
// output (the peers published their input addresses with the call descriptor; a peer whose input
// is its zero-copy buffer is read in its segment), then wait until every peer has finished
// reading ours, since the caller may reuse input once we return.
void AllGatherImpl::gather_cma(const char* input, bool, std::size_t shard, char* output) {
  const std::size_t W = static_cast<std::size_t>(ctx_->topo().world_size());
  char* own_out = output + shard * ctx_->topo().world_rank();
  // An input inside another rank's block of the output is read by the host peers until pull()
  // returns: the blocks go to a buffer of their own first, and into the output after.
  std::vector<char> held;
  if (input != own_out && ops::overlaps(input, shard, output, shard * W)) held.resize(shard * W);
  char* dst = held.empty() ? output : held.data();
  if (input != dst + (own_out - output)) std::memcpy(dst + (own_out - output), input, shard);
  single_copy_.pull(*core_, [&](int q, int g) {
    char* to = dst + shard * g;
    const uint64_t addr = core_->handshake().word(q);
    if (addr == 0)
      std::memcpy(to, gather_.from(g).data(), shard);
    else
      shm::cma_read(single_copy_.pid(q), addr, to, shard);
  });
  if (!held.empty()) std::memcpy(output, held.data(), held.size());
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(AllGather, AllGatherOptions);
FLUXCPP_PUBLIC_INPUT_BUFFER(AllGather)

void AllGather::forward(const void* input, int64_t m, void* output) {
  ops::checked(impl_).forward(input, m, output);
}

}  // namespace fluxcpp
