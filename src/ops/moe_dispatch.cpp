#include "ops/moe_dispatch.hpp"

#include <algorithm>
#include <cstring>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/mailbox.hpp"
#include "ops/core/op_base.hpp"

namespace fluxcpp {
namespace detail {

namespace {
// What travels with a row when its receiver asks for weights or sources: token, k, weight.
struct Meta {
  int32_t t, k;
  float w;
};
constexpr std::size_t kMeta = sizeof(Meta);
static_assert(kMeta == 12, "Meta is packed as three 4-byte words");
// Packed rows are published (and the transport may ship them) every this many bytes.
constexpr std::size_t kDispatchPublishBytes = std::size_t{256} << 10;

}  // namespace

void MoeDispatchImpl::create(const comm::Parts& c, const std::string& local_error) {
  const MoeDispatchOptions o = opts_;
  const int W = c.topo().world_size();
  opts_.max_recv_rows = ops::check_moe_create(
      c, kOp, {o.max_tokens, o.hidden, o.topk, o.num_experts, o.max_recv_rows, o.dtype, o.dtype},
      local_error);
  L_ = o.num_experts / W;
  row_ = static_cast<std::size_t>(o.hidden) * dtype_size(o.dtype);
  const auto slots = static_cast<std::size_t>(o.max_tokens * o.topk);
  const std::size_t out_bytes = slots * (row_ + kMeta);
  const std::size_t in_bytes = static_cast<std::size_t>(opts_.max_recv_rows) * (row_ + kMeta);
  comm::agree(c.control(), [&] {
    resize_or_raise(counts_, static_cast<std::size_t>(o.num_experts), kOp, "expert counts");
    resize_or_raise(gather_, slots, kOp, "the gather index");
    resize_or_raise(topk_index_, slots, kOp, "the topk index");
    resize_or_raise(vector_, static_cast<std::size_t>(o.num_experts) + 2, kOp, "counts");
  });
  a2a_ = ops::A2aExchange(links_, layout_, out_bytes, in_bytes, ops::needs_data(links_));
  // The handshake vector: counts [E], flags, num_tokens.
  make_core(ops::OpCore::Spec::of(kOp).with_vector(static_cast<int>(o.num_experts) + 2));
  routing_ = ops::MoeRouting(W, o.num_experts, c.topo().world_rank());
}

int64_t MoeDispatchImpl::forward(const MoeDispatchInput& in, const MoeDispatchOutput& out,
                                 const std::string& local_error) {
  return call(in, out, local_error, {});
}

int64_t MoeDispatchImpl::forward_by_expert(const MoeDispatchInput& in, const MoeDispatchOutput& out,
                                           const ExpertReady& on_expert) {
  return call(in, out, {}, on_expert);
}

int64_t MoeDispatchImpl::call(const MoeDispatchInput& in, const MoeDispatchOutput& out,
                              const std::string& local_error, const ExpertReady& on_expert) {
  const int W = ctx_->topo().world_size(), r = ctx_->topo().world_rank();
  ops::CallDescriptor d;
  d.error = local_error.empty() ? validate(in, out)
                                : fmt::format("{}: {} (rank {})", kOp, local_error, r);
  if (d.error.empty())
    d.error = ops::own_layout(kOp, r, in.topk_ids, in.num_tokens, opts_.topk, opts_.num_experts, W,
                              counts_.data(), nullptr, gather_.data(), topk_index_.data());
  std::fill(vector_.begin(), vector_.end(), 0);
  if (d.error.empty()) {
    std::copy(counts_.begin(), counts_.end(), vector_.begin());
    uint64_t flags = 0;
    if (in.topk_weights != nullptr) flags |= kHasWeights;
    if (out.recv_weights != nullptr) flags |= kWantsWeights;
    if (out.recv_src != nullptr) flags |= kWantsSrc;
    if (out.recv == nullptr) flags |= kNoRecv;
    vector_[static_cast<std::size_t>(opts_.num_experts)] = static_cast<int64_t>(flags);
    vector_[static_cast<std::size_t>(opts_.num_experts) + 1] = in.num_tokens;
    prefix_ = ops::expert_prefix(counts_.data(), opts_.num_experts);
  }
  d.vector = vector_.data();
  d.agreed_check = [&] { return agree(out); };
  core_->run(ops::Path::kFused, d, /*noop=*/false,
             [&](const ops::Call&) { run(in, out, on_expert); });
  return routing_.recv_rows(r);
}

void MoeDispatchImpl::run(const MoeDispatchInput& in, const MoeDispatchOutput& out,
                          const ExpertReady& on_expert) {
  const comm::Parts& c = *ctx_;
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  // Block of s for t: its rows for t's experts, in s's expert-major order, then their Meta.
  a2a_.begin(*core_, blocks_.plan(W, r, [&](int s, int t) {
    return static_cast<std::size_t>(routing_.rows(s, t)) * (row_ + (meta_for(t) ? kMeta : 0));
  }));
  // 1. Every block: other hosts' first (the transport ships them as they are published), then
  // the host peers' in ring order.
  for (int t : a2a_.targets()) pack(t, in);
  // 2. Our own rows, straight into place.
  own_rows(in, out);
  // 3. The peers' blocks: the host's (in the order they are packed for us), then other hosts'
  // rows, copied into place as they land; expert by expert when the caller starts work on each.
  std::vector<std::pair<int, ops::Inbox>> from;
  for (int s : a2a_.sources()) from.emplace_back(s, a2a_.from(s));
  if (on_expert) {
    for (int64_t l = 0; l < L_; ++l) {
      for (const auto& [s, box] : from) unpack_rows(s, l, box, out);
      on_expert(l);
    }
  } else {
    for (const auto& [s, box] : from)
      for (int64_t l = 0; l < L_; ++l) unpack_rows(s, l, box, out);
  }
  for (const auto& [s, box] : from) unpack_meta(s, box, out);
}

void MoeDispatchImpl::pack(int t, const MoeDispatchInput& in) {
  const ops::Outbox box = a2a_.to(t);
  const int64_t j0 = prefix_[static_cast<std::size_t>(t * L_)];
  const int64_t j1 = prefix_[static_cast<std::size_t>((t + 1) * L_)];
  const auto* src = static_cast<const char*>(in.input);
  char* dst = box.data();
  std::size_t published = 0;
  for (int64_t j = j0; j < j1; ++j) {
    const std::size_t at = static_cast<std::size_t>(j - j0) * row_;
    std::memcpy(dst + at, src + static_cast<std::size_t>(gather_[j]) * row_, row_);
    if (at + row_ - published >= kDispatchPublishBytes) {
      published = at + row_;
      box.publish(published);
    }
  }
  const auto n = static_cast<std::size_t>(j1 - j0);
  box.publish(n * row_);
  if (n > 0 && meta_for(t)) {
    char* m = dst + n * row_;
    for (int64_t j = j0; j < j1; ++j) {
      const Meta x{
          gather_[j], topk_index_[j],
          in.topk_weights != nullptr
              ? in.topk_weights[static_cast<int64_t>(gather_[j]) * opts_.topk + topk_index_[j]]
              : 0.0f};
      std::memcpy(m + static_cast<std::size_t>(j - j0) * kMeta, &x, kMeta);
    }
  }
  box.publish_all();
}

void MoeDispatchImpl::own_rows(const MoeDispatchInput& in, const MoeDispatchOutput& out) {
  const int r = ctx_->topo().world_rank();
  const auto* src = static_cast<const char*>(in.input);
  auto* recv = static_cast<char*>(out.recv);
  for (int64_t l = 0; l < L_; ++l) {
    const int64_t e = r * L_ + l, base = routing_.dest_row(r, l) - prefix_[e];
    for (int64_t j = prefix_[e]; j < prefix_[e + 1]; ++j) {
      const int32_t t = gather_[j], k = topk_index_[j];
      const int64_t at = base + j;
      std::memcpy(recv + static_cast<std::size_t>(at) * row_,
                  src + static_cast<std::size_t>(t) * row_, row_);
      if (out.recv_weights != nullptr)
        out.recv_weights[at] = in.topk_weights[static_cast<int64_t>(t) * opts_.topk + k];
      if (out.recv_src != nullptr) {
        const int32_t x[3] = {r, t, k};
        std::memcpy(out.recv_src + 3 * at, x, sizeof x);
      }
    }
  }
}

void MoeDispatchImpl::unpack_rows(int s, int64_t l, const ops::Inbox& box,
                                  const MoeDispatchOutput& out) {
  const int r = ctx_->topo().world_rank();
  const auto cnt = static_cast<std::size_t>(routing_.count(s, r * L_ + l));
  if (cnt == 0) return;
  const auto b = static_cast<std::size_t>(routing_.block_row(s, l));
  box.drain(static_cast<char*>(out.recv) + static_cast<std::size_t>(routing_.dest_row(s, l)) * row_,
            b * row_, (b + cnt) * row_);
}

void MoeDispatchImpl::unpack_meta(int s, const ops::Inbox& box, const MoeDispatchOutput& out) {
  const int r = ctx_->topo().world_rank();
  const auto n = static_cast<std::size_t>(routing_.rows(s, r));
  if (n == 0 || (out.recv_weights == nullptr && out.recv_src == nullptr)) return;
  box.wait_all();
  const char* m = box.data() + n * row_;
  for (int64_t l = 0; l < L_; ++l) {
    const int64_t cnt = routing_.count(s, r * L_ + l), b = routing_.block_row(s, l);
    const int64_t d = routing_.dest_row(s, l);
    for (int64_t i = 0; i < cnt; ++i) {
      Meta x;
      std::memcpy(&x, m + static_cast<std::size_t>(b + i) * kMeta, kMeta);
      if (out.recv_weights != nullptr) out.recv_weights[d + i] = x.w;
      if (out.recv_src != nullptr) {
        const int32_t v[3] = {s, x.t, x.k};
        std::memcpy(out.recv_src + 3 * (d + i), v, sizeof v);
      }
    }
  }
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(MoeDispatch, MoeDispatchOptions);

int64_t MoeDispatch::forward(const MoeDispatchInput& input, const MoeDispatchOutput& output) {
  return ops::checked(impl_).forward(input, output);
}

}  // namespace fluxcpp
