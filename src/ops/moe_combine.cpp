#include "ops/moe_combine.hpp"

#include <algorithm>
#include <cstring>

#include "error_util.hpp"
#include "kernels/moe_combine_kernel.hpp"
#include "ops/core/create.hpp"
#include "ops/core/mailbox.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"

namespace fluxcpp {
namespace detail {

namespace {
constexpr std::size_t kPublishBytes = std::size_t{256} << 10;
}  // namespace

void MoeCombineImpl::create(const comm::Parts& c, const std::string& local_error) {
  const MoeCombineOptions o = opts_;
  const int W = c.topo().world_size();
  opts_.max_recv_rows = ops::check_moe_create(c, kOp,
                                              {o.max_tokens, o.hidden, o.topk, o.num_experts,
                                               o.max_recv_rows, o.input_dtype, o.output_dtype},
                                              local_error);
  L_ = o.num_experts / W;
  row_ = static_cast<std::size_t>(o.hidden) * dtype_size(o.input_dtype);
  const auto slots = static_cast<std::size_t>(o.max_tokens * o.topk);
  comm::agree(c.control(), [&] {
    resize_or_raise(counts_, static_cast<std::size_t>(o.num_experts), kOp, "expert counts");
    resize_or_raise(scatter_, slots, kOp, "the scatter index");
    resize_or_raise(slot_rows_, slots, kOp, "the slot rows");
    resize_or_raise(vector_, static_cast<std::size_t>(o.num_experts) + 2, kOp, "counts");
  });
  // Out: every received row goes back (≤ max_recv_rows); in: at most T·K rows come home.
  a2a_ = ops::A2aExchange(links_, layout_, static_cast<std::size_t>(opts_.max_recv_rows) * row_,
                          slots * row_, ops::needs_data(links_));
  // The handshake vector: counts [E], num_rows, num_tokens.
  make_core(ops::OpCore::Spec::of(kOp).with_vector(static_cast<int>(o.num_experts) + 2));
  routing_ = ops::MoeRouting(W, o.num_experts, c.topo().world_rank());
}

std::string MoeCombineImpl::validate(const MoeCombineInput& in, const void* output) const {
  // The counts' ranges first, then the pointers each count needs.
  std::string e =
      ops::check_count(*ctx_, kOp, "num_tokens", in.num_tokens, opts_.max_tokens, {}, "max_tokens");
  if (e.empty())
    e = ops::check_count(*ctx_, kOp, "num_rows", in.num_rows, opts_.max_recv_rows,
                         {{"input", in.input}}, "max_recv_rows");
  if (e.empty())
    e = ops::check_count(*ctx_, kOp, "num_tokens", in.num_tokens, opts_.max_tokens,
                         {{"topk_ids", in.topk_ids}, {"output", output}}, "max_tokens");
  return e;
}

std::string MoeCombineImpl::agree() {
  const int W = ctx_->topo().world_size();
  routing_.build([&](int s) { return core_->handshake().vector(s); });
  for (int q = 0; q < W; ++q) {
    const int64_t passed = core_->handshake().vector(q)[opts_.num_experts];
    if (passed != routing_.recv_rows(q))
      return fmt::format(
          "{}: rank {} passed num_rows={} but receives {} rows under this routing (moe_dispatch's "
          "num_recv_rows) (reported by rank {})",
          kOp, q, passed, routing_.recv_rows(q), ctx_->topo().world_rank());
  }
  return {};
}

void MoeCombineImpl::forward(const MoeCombineInput& in, void* output) {
  const int W = ctx_->topo().world_size(), r = ctx_->topo().world_rank();
  ops::CallDescriptor d;
  d.error = validate(in, output);
  if (d.error.empty())
    d.error = ops::own_layout(kOp, r, in.topk_ids, in.num_tokens, opts_.topk, opts_.num_experts, W,
                              counts_.data(), scatter_.data(), nullptr, nullptr);
  std::fill(vector_.begin(), vector_.end(), 0);
  if (d.error.empty()) {
    std::copy(counts_.begin(), counts_.end(), vector_.begin());
    vector_[static_cast<std::size_t>(opts_.num_experts)] = in.num_rows;
    vector_[static_cast<std::size_t>(opts_.num_experts) + 1] = in.num_tokens;
    prefix_ = ops::expert_prefix(counts_.data(), opts_.num_experts);
  }
  d.vector = vector_.data();
  d.agreed_check = [&] { return agree(); };
  core_->run(ops::Path::kFused, d, /*noop=*/false, [&](const ops::Call&) { run(in, output); });
}

void MoeCombineImpl::stage(int s, const char* input) {
  const ops::Outbox box = a2a_.to(s);
  const int r = ctx_->topo().world_rank();
  std::size_t published = 0;
  for (int64_t l = 0; l < L_; ++l) {
    const auto cnt = static_cast<std::size_t>(routing_.count(s, r * L_ + l));
    if (cnt == 0) continue;
    const auto at = static_cast<std::size_t>(routing_.block_row(s, l)) * row_;
    std::memcpy(box.data() + at, input + static_cast<std::size_t>(routing_.dest_row(s, l)) * row_,
                cnt * row_);
    if (at + cnt * row_ - published >= kPublishBytes) {
      published = at + cnt * row_;
      box.publish(published);
    }
  }
  box.publish_all();
}

void MoeCombineImpl::run(const MoeCombineInput& in, void* output) {
  const comm::Parts& c = *ctx_;
  const int W = c.topo().world_size(), r = c.topo().world_rank();
  // Owner q's block for source s: rows(s, q) rows in s's expert-major order.
  a2a_.begin(*core_, blocks_.plan(W, r, [&](int q, int s) {
    return static_cast<std::size_t>(routing_.rows(s, q)) * row_;
  }));
  const auto* input = static_cast<const char*>(in.input);
  for (int t : a2a_.targets()) stage(t, input);

  // Where each slot's row is: our own input for the experts we own, else the owner's block (in
  // its segment on this host, in ours when it came from another host).
  std::vector<const char*> block(static_cast<std::size_t>(W), nullptr);
  for (int q : core_->links().down()) {
    if (routing_.rows(r, q) == 0) continue;
    const ops::Inbox box = a2a_.from(q);
    box.wait_all();
    block[q] = box.data();
  }
  const int64_t K = opts_.topk, T = in.num_tokens;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = in.topk_ids[t * K + k];
      const void*& p = slot_rows_[static_cast<std::size_t>(t * K + k)];
      if (e < 0) {
        p = nullptr;
        continue;
      }
      const int q = static_cast<int>(e / L_);
      const int64_t j = scatter_[static_cast<std::size_t>(t * K + k)];
      if (q == r)
        p = input +
            static_cast<std::size_t>(routing_.dest_row(r, e - r * L_) + j - prefix_[e]) * row_;
      else
        p = block[q] +
            static_cast<std::size_t>(j - prefix_[static_cast<std::size_t>(q * L_)]) * row_;
    }
  kernels::moe_combine_rows(slot_rows_.data(), in.topk_weights, 0, T, K, opts_.hidden,
                            opts_.input_dtype, opts_.output_dtype, output);
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(MoeCombine, MoeCombineOptions);

void MoeCombine::forward(const MoeCombineInput& input, void* output) {
  ops::checked(impl_).forward(input, output);
}

}  // namespace fluxcpp
