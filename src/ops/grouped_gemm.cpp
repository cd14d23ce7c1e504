#include "ops/grouped_gemm.hpp"

#include "ops/core/op_core.hpp"

#include <algorithm>
#include <limits>

#include "comm/parallel_for.hpp"
#include "error_util.hpp"
#include "ops/core/op_base.hpp"

namespace fluxcpp {
namespace detail {

namespace {

// Narrowest column slab worth a participant of its own: below it the GEMM calls get too thin
// (the same threshold as ops::parallel_gemm).
constexpr int64_t kMinSlab = 64;

bool valid_pair(DType in, DType out) {
  return (in == DType::kFloat32 && out == DType::kFloat32) ||
         (in == DType::kFloat64 && out == DType::kFloat64) ||
         (in == DType::kBFloat16 && (out == DType::kBFloat16 || out == DType::kFloat32));
}

}  // namespace

GroupedGemmImpl::GroupedGemmImpl(const std::shared_ptr<ContextImpl>& ctx,
                                 const GroupedGemmOptions& o, const std::string& local_error)
    : ctx_(comm::parts_of(ctx)), opts_(o) {
  if (!ctx_) raise(Errc::kInvalidUsage, "{}: the context is empty (moved from)", kOp);
  ctx_->life().check_usable(kOp);
  if (!local_error.empty()) raise(Errc::kInvalidArgument, "{}: {}", kOp, local_error);
  FLUXCPP_CHECK_ARG(dtype_valid(o.input_dtype) && dtype_valid(o.output_dtype) &&
                        valid_pair(o.input_dtype, o.output_dtype),
                    "{}: (input, output) dtypes ({}, {}) are not one of (f32, f32), (f64, f64), "
                    "(bf16, bf16), (bf16, f32)",
                    kOp, dtype_name(o.input_dtype), dtype_name(o.output_dtype));
  FLUXCPP_CHECK_ARG(o.num_groups >= 1, "{}: num_groups={} must be >= 1", kOp, o.num_groups);
  FLUXCPP_CHECK_ARG(o.n >= 1 && o.k >= 1, "{}: n={} and k={} must be >= 1", kOp, o.n, o.k);
  FLUXCPP_CHECK_ARG(o.max_m >= 0, "{}: max_m={} must be >= 0", kOp, o.max_m);
  // BLAS sizes are int; byte offsets (8-byte elements at most) must fit in int64.
  constexpr int64_t kMaxElems = std::numeric_limits<int64_t>::max() / 8;
  FLUXCPP_CHECK_ARG(o.n <= INT32_MAX && o.k <= INT32_MAX && o.max_m <= INT32_MAX &&
                        o.num_groups <= kMaxElems / (o.n * o.k) &&
                        o.max_m <= kMaxElems / std::max(o.n, o.k),
                    "{}: num_groups={}, max_m={}, n={}, k={} are too large (BLAS sizes are int, "
                    "the weights must be addressable)",
                    kOp, o.num_groups, o.max_m, o.n, o.k);
  in_elem_ = dtype_size(o.input_dtype);
  out_elem_ = dtype_size(o.output_dtype);
  offsets_.assign(static_cast<std::size_t>(o.num_groups) + 1, 0);
}

int64_t GroupedGemmImpl::validate(const void* input, const int64_t* splits, const void* weight,
                                  const void* output) {
  const int64_t G = opts_.num_groups;
  FLUXCPP_CHECK_ARG(splits != nullptr, "{}: splits is NULL (num_groups={})", kOp, G);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t m = 0;  // saturates at kMax instead of overflowing
  for (int64_t g = 0; g < G; ++g) {
    const int64_t s = splits[g];
    FLUXCPP_CHECK_ARG(s >= 0, "{}: splits[{}]={} must be >= 0", kOp, g, s);
    m = s > kMax - m ? kMax : m + s;
  }
  FLUXCPP_CHECK_ARG(m <= opts_.max_m, "{}: the splits add up to {}{} rows, more than max_m={}", kOp,
                    m == kMax ? ">= " : "", m, opts_.max_m);
  if (m > 0) {
    FLUXCPP_CHECK_ARG(input != nullptr, "{}: input is NULL with m={}", kOp, m);
    FLUXCPP_CHECK_ARG(weight != nullptr, "{}: weight is NULL with m={}", kOp, m);
    FLUXCPP_CHECK_ARG(output != nullptr, "{}: output is NULL with m={}", kOp, m);
  }
  for (int64_t g = 0; g < G; ++g) offsets_[g + 1] = offsets_[g] + splits[g];
  return m;
}

std::vector<GroupedGemmImpl::Part> GroupedGemmImpl::plan(int64_t m, int64_t n, int threads) {
  std::vector<Part> parts;
  if (m <= 0 || n <= 0) return parts;
  // Column slabs first: every participant then packs only its slab of each group's weight (no
  // weight is packed or widened twice) and the split is even whatever the group sizes, so a
  // skewed routing keeps every thread busy. Only when the weight is too narrow for a slab per
  // thread do the remaining threads split the rows (each range may cross group boundaries).
  threads = std::max(1, threads);
  const int64_t S = std::clamp<int64_t>(n / kMinSlab, 1, threads);
  const int64_t R = std::min<int64_t>(m, std::max<int64_t>(1, threads / S));
  const int64_t slab = ((n + S - 1) / S + 63) / 64 * 64;  // multiples of 64: the engine's blocks
  for (int64_t ri = 0; ri < R; ++ri) {
    const int64_t r0 = m * ri / R, r1 = m * (ri + 1) / R;
    for (int64_t si = 0; si < S; ++si) {
      const int64_t c0 = std::min(n, si * slab), c1 = si == S - 1 ? n : std::min(n, c0 + slab);
      if (c0 < c1) parts.push_back({r0, r1, c0, c1});
    }
  }
  return parts;
}

void GroupedGemmImpl::run_part(const Part& p, kernels::GemmWeight& w, const char* input,
                               const char* weight, const float* scale, char* output) const {
  const int64_t n = opts_.n, k = opts_.k, cols = p.col1 - p.col0;
  const bool trans = opts_.transpose_weight;
  // The first group with rows at or after row0: P[g+1] > row0.
  auto g = static_cast<int64_t>(std::upper_bound(offsets_.begin() + 1, offsets_.end(), p.row0) -
                                (offsets_.begin() + 1));
  for (; g < opts_.num_groups && offsets_[g] < p.row1; ++g) {
    const int64_t i0 = std::max(offsets_[g], p.row0), i1 = std::min(offsets_[g + 1], p.row1);
    if (i0 >= i1) continue;  // an empty group: its weight is not read
    // The slab of group g's weight: rows col0.. of [n, k], or columns col0.. of [k, n].
    const char* wg = weight + static_cast<std::size_t>(g * n * k) * in_elem_;
    const char* slab = wg + static_cast<std::size_t>(trans ? p.col0 : p.col0 * k) * in_elem_;
    w.prepare(opts_.input_dtype, slab, cols, k, trans, trans ? n : k);
    kernels::GemmOut out;
    out.ldc = n;
    out.dtype = opts_.output_dtype;
    out.scale = scale != nullptr ? static_cast<double>(scale[g]) : 1.0;
    // One call per group and slab: every call re-reads (and the engine re-blocks) the slab.
    out.c = output + static_cast<std::size_t>(i0 * n + p.col0) * out_elem_;
    kernels::gemm_tile(w, input + static_cast<std::size_t>(i0 * k) * in_elem_, k, i1 - i0, 0, cols,
                       out);
  }
}

void GroupedGemmImpl::forward(const void* input, const int64_t* splits, const void* weight,
                              const float* scale, void* output) {
  // Local: no communicator is involved, so a closed or broken context does not stop it (after
  // close() it computes on the calling thread).
  ops::ContextEntry entry(*ctx_, kOp);
  const int64_t m = validate(input, splits, weight, output);
  if (m == 0) return;
  kernels::BlasSingleThreadScope one_blas_thread;  // our participants are the parallelism
  const comm::Parts& c = *ctx_;
  const std::vector<Part> parts = plan(m, opts_.n, std::max(1, c.runtime().num_compute_workers()));
  if (weights_.size() < parts.size()) weights_.resize(parts.size());
  const auto* in = static_cast<const char*>(input);
  const auto* wt = static_cast<const char*>(weight);
  auto* out = static_cast<char*>(output);

  // Part 0 runs on the calling thread, part p on compute worker p (as ops::parallel_gemm).
  comm::parallel_for(c.runtime(), static_cast<int>(parts.size()),
                     [&](int p) { run_part(parts[p], weights_[p], in, wt, scale, out); });
}

}  // namespace detail

GroupedGemm::GroupedGemm(const Context& ctx, const GroupedGemmOptions& options)
    : impl_(std::make_unique<detail::GroupedGemmImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(GroupedGemm, GroupedGemmOptions);

void GroupedGemm::forward(const void* input, const int64_t* splits, const void* weight,
                          const float* scale, void* output) {
  ops::checked(impl_).forward(input, splits, weight, scale, output);
}

}  // namespace fluxcpp
