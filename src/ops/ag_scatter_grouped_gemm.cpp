#include "ops/ag_scatter_grouped_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/tiled_gemm.hpp"

namespace fluxcpp {
namespace detail {

namespace {
// Another host's block is computed in up to kMaxPieces pieces as it lands, each with about
// MoeTpRouting::kPieceRows rows per local expert at least: every GEMM call re-blocks its expert's
// weight, so smaller pieces cost more than the earlier start wins.
constexpr int64_t kMaxPieces = 4;
}  // namespace

void AgScatterGroupedGemmImpl::create(const comm::Parts& c, const std::string& local_error) {
  const MoeTpOptions o = opts_;
  ops::check_moe_tp_create(c, kOp, o, local_error);
  const int W = c.topo().world_size();
  in_row_ = static_cast<std::size_t>(o.hidden) * dtype_size(o.input_dtype);
  out_row_ = static_cast<std::size_t>(o.ffn_shard) * dtype_size(o.output_dtype);
  routing_ = ops::MoeTpRouting(kOp, o, W, c.topo().world_rank());
  const int64_t L = o.num_experts / o.ep_size;
  weights_ = ops::ExpertWeights(L, o.input_dtype, o.ffn_shard, o.hidden, o.transpose_weight);
  const std::size_t max_block = static_cast<std::size_t>(o.max_tokens / W) * in_row_;
  gather_ = ops::GatherExchange(c, links_, layout_, max_block, ops::needs_data(links_));
  make_core(ops::OpCore::Spec::of(kOp, {"num_tokens"}).runs_gemm().with_vector(ops::kMoeTpVector));
}

void AgScatterGroupedGemmImpl::forward(const void* input, int64_t T, const int64_t* splits,
                                       const int32_t* scatter_index, const void* weight,
                                       const float* scale, void* output, void* gathered_input) {
  call(ops::Path::kFused, {static_cast<const char*>(input), T, splits, scatter_index, weight, scale,
                           static_cast<char*>(output), static_cast<char*>(gathered_input)});
}

void AgScatterGroupedGemmImpl::forward_gemm_only(const void* input, int64_t T,
                                                 const int64_t* splits,
                                                 const int32_t* scatter_index, const void* weight,
                                                 const float* scale, void* output) {
  call(ops::Path::kGemmOnly, {static_cast<const char*>(input), T, splits, scatter_index, weight,
                              scale, static_cast<char*>(output), nullptr});
}

void AgScatterGroupedGemmImpl::forward_comm_only(const void* input, int64_t T,
                                                 const int64_t* splits,
                                                 const int32_t* scatter_index,
                                                 void* gathered_input) {
  call(ops::Path::kCommOnly, {static_cast<const char*>(input), T, splits, scatter_index, nullptr,
                              nullptr, nullptr, static_cast<char*>(gathered_input)});
}

void AgScatterGroupedGemmImpl::call(ops::Path path, const ops::MoeTpCall& a) {
  ops::CallDescriptor d;
  const bool compute = path != ops::Path::kCommOnly;
  d.error = ops::check_forward(*ctx_, kOp, a.T, opts_.max_tokens, {{"input", a.input}});
  if (d.error.empty()) d.error = routing_.load(a.T, a.splits, a.scatter, nullptr);
  if (d.error.empty() && compute && routing_.rows() > 0) {
    if (a.weight == nullptr)
      d.error = fmt::format("{}: weight is NULL with {} rows on this rank (rank {})", kOp,
                            routing_.rows(), ctx_->topo().world_rank());
    else if (a.output == nullptr)
      d.error = fmt::format("{}: output is NULL with {} rows on this rank (rank {})", kOp,
                            routing_.rows(), ctx_->topo().world_rank());
  }
  d.fields = {a.T, 0, 0, 0};
  hashes_[0] = d.error.empty() ? static_cast<int64_t>(routing_.hash()) : 0;
  d.vector = hashes_;
  d.agreed_check = [this] { return ops::check_agreed_routing(*ctx_, kOp, core_->handshake()); };
  if (d.error.empty()) schedule_ = plan(path, routing_.rows());
  core_->run(path, d, a.T == 0, [&](const ops::Call&) { run(schedule_, a); });
}

void AgScatterGroupedGemmImpl::compute(const std::vector<ops::RoutedSlot>& slots, std::size_t begin,
                                       std::size_t end, const RowSource& src,
                                       const ops::MoeTpCall& a) {
  if (begin >= end) return;
  ops::bucket_by_expert(slots, begin, end, routing_, order_, first_);
  const int64_t L = routing_.num_local_experts();
  for (int64_t l = 0; l < L; ++l) {
    const int64_t n = first_[l + 1] - first_[l];
    if (n == 0) continue;
    const int32_t* idx = order_.data() + first_[l];
    // Gather the tokens' rows; when the rows are consecutive output rows (moe_layout's stable
    // order gives that), the GEMM writes the output in place.
    if (a_rows_.size() < static_cast<std::size_t>(n) * in_row_)
      a_rows_.resize(static_cast<std::size_t>(n) * in_row_);
    bool consecutive = true;
    const int32_t row0 = slots[idx[0]].row;
    for (int64_t i = 0; i < n; ++i) {
      const ops::RoutedSlot& s = slots[idx[i]];
      std::memcpy(a_rows_.data() + i * in_row_, src(s.t), in_row_);
      consecutive = consecutive && s.row == row0 + i;
    }
    if (!consecutive && c_rows_.size() < static_cast<std::size_t>(n) * out_row_)
      c_rows_.resize(static_cast<std::size_t>(n) * out_row_);
    kernels::GemmOut o;
    o.c = consecutive ? a.output + static_cast<std::size_t>(row0) * out_row_ : c_rows_.data();
    o.ldc = opts_.ffn_shard;
    o.dtype = opts_.output_dtype;
    o.scale = a.factors != nullptr ? static_cast<double>(a.factors[l]) : 1.0;
    // Tiles with transport progress in between only while transfers are in flight (this
    // rank's sends to other hosts included); otherwise one call per expert: each GEMM call
    // re-blocks the expert's weight.
    if (core_->transfers_pending())
      ops::tiled_gemm(*core_, weights_.of(l), a_rows_.data(), opts_.hidden, n, 0, opts_.ffn_shard,
                      o);
    else
      ops::parallel_gemm(*ctx_, weights_.of(l), a_rows_.data(), opts_.hidden, n, 0, opts_.ffn_shard,
                         o);
    if (!consecutive)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(a.output + static_cast<std::size_t>(slots[idx[i]].row) * out_row_,
                    c_rows_.data() + i * out_row_, out_row_);
  }
}

void AgScatterGroupedGemmImpl::run(const Schedule& s, const ops::MoeTpCall& a) {
  weights_.begin(a.weight);
  if (s.path == ops::Path::kCommOnly) return run_comm_only(a);
  if (s.path == ops::Path::kGemmOnly) return run_gemm_only(s, a);
  switch (s.kind) {
    case Schedule::Kind::kAllRows: return run_all_rows(a);
    case Schedule::Kind::kByRank: return run_by_rank(a);
  }
}

void AgScatterGroupedGemmImpl::run_all_rows(const ops::MoeTpCall& a) {
  // Pieces per source would be too small for the GEMM engine (each call re-blocks its expert's
  // weight): once every block with rows here has landed, one GEMM per expert over all rows,
  // still read straight from the segments.
  stage(a);
  compute_all_rows(a, /*held=*/false);
  copy_gathered(a);
}

void AgScatterGroupedGemmImpl::run_by_rank(const ops::MoeTpCall& a) {
  // 1. Own tokens first: they need nothing from anyone. 2. Host peers in ring order, then the
  // other hosts' ranks in the order their blocks reach this host: each source's rows start once
  // its tokens have landed — a host peer's block read straight from its segment, another host's
  // in pieces as the transport brings it.
  const int r = ctx_->topo().world_rank();
  stage(a);
  const auto& own = routing_.slots_from(r);
  compute(own, 0, own.size(), rows_of(a.input, r * per(a)), a);
  for (int g : gather_.others()) compute_landing(g, a);
  copy_gathered(a);
}

void AgScatterGroupedGemmImpl::run_gemm_only(const Schedule& s, const ops::MoeTpCall& a) {
  // The schedule's GEMMs on whatever the buffers hold (no waits).
  if (s.kind == Schedule::Kind::kAllRows) return compute_all_rows(a, /*held=*/true);
  const int r = ctx_->topo().world_rank();
  const auto& own = routing_.slots_from(r);
  compute(own, 0, own.size(), rows_of(a.input, r * per(a)), a);
  for (int g : gather_.others()) {
    const auto& slots = routing_.slots_from(g);
    compute(slots, 0, slots.size(), rows_of(gather_.data_of(g), g * per(a)), a);
  }
}

void AgScatterGroupedGemmImpl::run_comm_only(const ops::MoeTpCall& a) {
  stage(a);
  copy_gathered(a);
}

void AgScatterGroupedGemmImpl::stage(const ops::MoeTpCall& a) {
  gather_.begin(*core_, block(a));
  gather_.stage(a.input, block(a), /*zero_copy=*/false);
}

void AgScatterGroupedGemmImpl::compute_all_rows(const ops::MoeTpCall& a, bool held) {
  const int W = ctx_->topo().world_size(), r = ctx_->topo().world_rank();
  const int64_t per = this->per(a);
  std::vector<const char*> block(static_cast<std::size_t>(W), nullptr);
  block[r] = a.input;
  all_.clear();
  for (int g = 0; g < W; ++g) {
    const auto& slots = routing_.slots_from(g);
    all_.insert(all_.end(), slots.begin(), slots.end());
    if (g == r || slots.empty()) continue;
    if (held) {
      block[g] = gather_.data_of(g);
    } else {
      const ops::Inbox in = gather_.from(g);
      in.wait_all();
      block[g] = in.data();
    }
  }
  compute(
      all_, 0, all_.size(), [&](int32_t t) { return block[t / per] + (t % per) * in_row_; }, a);
}

void AgScatterGroupedGemmImpl::compute_landing(int g, const ops::MoeTpCall& a) {
  const auto& slots = routing_.slots_from(g);
  if (slots.empty()) return;
  const int64_t per = this->per(a), t0 = g * per;
  const ops::Inbox in = gather_.from(g);
  const int64_t L = routing_.num_local_experts();
  // A block on the link in pieces, as it lands; a host peer's whole (it is there at once).
  const int64_t pieces = gather_.networked(g)
                             ? std::clamp<int64_t>(static_cast<int64_t>(slots.size()) /
                                                       (L * ops::MoeTpRouting::kPieceRows),
                                                   1, kMaxPieces)
                             : 1;
  const int64_t piece = (per + pieces - 1) / pieces;
  std::size_t next = 0;
  for (int64_t done = 0; done < per && next < slots.size();) {
    const int64_t want = std::min(per, done + piece);
    const int64_t have =
        static_cast<int64_t>(in.wait(static_cast<std::size_t>(want) * in_row_) / in_row_);
    std::size_t end = next;
    while (end < slots.size() && slots[end].t - t0 < have) ++end;
    compute(slots, next, end, rows_of(in.data(), t0), a);
    next = end;
    done = have;
  }
}

void AgScatterGroupedGemmImpl::copy_gathered(const ops::MoeTpCall& a) {
  if (a.gathered == nullptr) return;
  const int r = ctx_->topo().world_rank();
  std::memcpy(a.gathered + block(a) * r, a.input, block(a));
  for (int g : gather_.others()) {
    const ops::Inbox in = gather_.from(g);
    in.wait_all();
    std::memcpy(a.gathered + block(a) * g, in.data(), block(a));
  }
}

}  // namespace detail

// The public class AgScatterGroupedGemm (include/fluxcpp/ag_scatter_grouped_gemm.hpp): each member
// forwards to the implementation above, through ops::checked (a moved-from op is kInvalidUsage).
FLUXCPP_PUBLIC_MADE_OP(AgScatterGroupedGemm, MoeTpOptions);

void AgScatterGroupedGemm::forward(const void* input, int64_t num_tokens, const int64_t* splits,
                                   const int32_t* scatter_index, const void* weight,
                                   const float* scale, void* output, void* gathered_input) {
  ops::checked(impl_).forward(input, num_tokens, splits, scatter_index, weight, scale, output,
                              gathered_input);
}
void AgScatterGroupedGemm::forward_gemm_only(const void* input, int64_t num_tokens,
                                             const int64_t* splits, const int32_t* scatter_index,
                                             const void* weight, const float* scale, void* output) {
  ops::checked(impl_).forward_gemm_only(input, num_tokens, splits, scatter_index, weight, scale,
                                        output);
}
void AgScatterGroupedGemm::forward_comm_only(const void* input, int64_t num_tokens,
                                             const int64_t* splits, const int32_t* scatter_index,
                                             void* gathered_input) {
  ops::checked(impl_).forward_comm_only(input, num_tokens, splits, scatter_index, gathered_input);
}

}  // namespace fluxcpp
