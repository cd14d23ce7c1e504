#include "ops/inplace_cast.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "error_util.hpp"
#include "fluxcpp/inplace_cast.hpp"
#include "kernels/inplace_cast.hpp"

namespace fluxcpp::ops {
namespace {

constexpr const char* kOp = "inplace_cast";
// Fewest elements worth handing to another thread: a piece must outlast the wake-up and the
// wait of a compute worker (tens of microseconds), i.e. a few hundred KiB of traffic.
constexpr int64_t kMinPiece = 64 * 1024;
// Pieces start at multiples of this many elements, so that two threads share no output cache
// line but at the piece boundaries of a step.
constexpr int64_t kPieceAlign = 64;
// The unsplit step (run by the calling thread alone while the workers idle) takes 1/kSerialShare
// of the elements; the rest takes about log2(kSerialShare) splittable steps, one enqueue/wait
// round each.
constexpr int64_t kSerialShare = 64;

std::string dtype_text(DType t) {
  if (dtype_valid(t)) return dtype_name(t);
  return fmt::format("{} (not a dtype)", static_cast<int>(t));
}

void check_args(const void* data, int64_t count, DType from, DType to) {
  FLUXCPP_CHECK_ARG(kernels::inplace_cast_supported(from, to),
                    "{}: unsupported conversion from={} to={} (supported: f32->bf16, f64->f32, "
                    "bf16->f32, f32->f64)",
                    kOp, dtype_text(from), dtype_text(to));
  FLUXCPP_CHECK_ARG(count >= 0, "{}: count={} must be >= 0", kOp, count);
  const int64_t widest = static_cast<int64_t>(std::max(dtype_size(from), dtype_size(to)));
  FLUXCPP_CHECK_ARG(count <= std::numeric_limits<int64_t>::max() / widest,
                    "{}: count={} is too large: {} elements of {} bytes exceed INT64_MAX bytes",
                    kOp, count, count, widest);
  FLUXCPP_CHECK_ARG(data != nullptr || count == 0, "{}: data is NULL with count={} ({}->{})", kOp,
                    count, dtype_name(from), dtype_name(to));
}

// One splittable step over up to `threads` threads: the calling thread takes the first piece,
// compute worker w the w-th (worker 0 stays idle, as in parallel_gemm). Returns only once every
// enqueued piece has finished, whatever fails, so no worker touches the buffer afterwards.
void run_split(detail::ContextImpl& c, void* data, kernels::CastStep s, DType from, DType to,
               int threads) {
  const int64_t n = s.end - s.begin;
  const int t = static_cast<int>(std::clamp<int64_t>(n / kMinPiece, 1, threads));
  if (t == 1) return kernels::inplace_cast_range(data, s.begin, s.end, from, to);
  const int64_t piece = ((n + t - 1) / t + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
  std::vector<uint64_t> tickets;
  std::exception_ptr failed;
  try {
    tickets.reserve(static_cast<std::size_t>(t));
    for (int w = 1; w < t; ++w) {
      const int64_t b = std::min(s.end, s.begin + w * piece), e = std::min(s.end, b + piece);
      if (b >= e) break;
      tickets.push_back(
          c.compute_worker(w).enqueue([=] { kernels::inplace_cast_range(data, b, e, from, to); }));
    }
    kernels::inplace_cast_range(data, s.begin, std::min(s.end, s.begin + piece), from, to);
  } catch (...) {
    failed = std::current_exception();
  }
  const auto forever = std::chrono::steady_clock::time_point::max();
  for (std::size_t i = 0; i < tickets.size(); ++i) {
    try {
      c.compute_worker(static_cast<int>(i) + 1).wait(tickets[i], forever);
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

}  // namespace

void inplace_cast(detail::ContextImpl* c, void* data, int64_t count, DType from, DType to) {
  check_args(data, count, from, to);
  if (c != nullptr && c->closed()) raise(Errc::kInvalidUsage, "{}: the context was closed", kOp);
  if (count == 0) return;
  const int threads = c == nullptr ? 1 : std::max(1, c->num_compute_workers());
  if (threads == 1 || count < 2 * kMinPiece) {
    kernels::inplace_cast_range(data, 0, count, from, to);
    return;
  }
  // Steps run one after another; see kernels::inplace_cast_steps for why the pieces of a
  // splittable step never overwrite input that another thread (or a later step) still reads.
  const int64_t serial = std::max(kMinPiece, count / kSerialShare);
  for (const kernels::CastStep& s : kernels::inplace_cast_steps(count, from, to, serial)) {
    if (s.split)
      run_split(*c, data, s, from, to, threads);
    else
      kernels::inplace_cast_range(data, s.begin, s.end, from, to);
  }
}

}  // namespace fluxcpp::ops

namespace fluxcpp {

void inplace_cast(const Context* ctx, void* data, int64_t count, DType from, DType to) {
  if (ctx != nullptr && ctx->impl() == nullptr)
    raise(Errc::kInvalidUsage, "inplace_cast: the context was moved from");
  ops::inplace_cast(ctx == nullptr ? nullptr : ctx->impl().get(), data, count, from, to);
}

}  // namespace fluxcpp
