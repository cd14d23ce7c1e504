#include "ops/inplace_cast.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "comm/parallel_for.hpp"
#include "error_util.hpp"
#include "fluxcpp/inplace_cast.hpp"
#include "kernels/inplace_cast_kernel.hpp"
#include "ops/core/op_core.hpp"

namespace fluxcpp::ops {
namespace {

constexpr const char* kOp = "inplace_cast";
// Below this many elements the calling thread works alone: waking the compute workers and waiting
// for them (tens of microseconds) would cost more than they save.
constexpr int64_t kMinParallel = 256 * 1024;
// The part run by one thread alone (kernels::CastPlan::serial) is count / 2^doublings with as many
// doublings as keep it at least kMinSerial elements, at most kMaxDoublings (1/256 of the work).
constexpr int64_t kMinSerial = 4096;
constexpr int kMaxDoublings = 8;

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

// The chains of a plan: chain t > 0 on compute worker t, chain 0 on the calling thread
// (comm::parallel_for). Returns only once every chain has finished, whatever fails, so no worker
// touches the buffer afterwards.
void run_chains(const comm::Parts& c, void* data, const kernels::CastPlan& plan, DType from,
                DType to) {
  comm::parallel_for(c.runtime(), static_cast<int>(plan.chains.size()), [&](int t) {
    for (const kernels::CastRange& r : plan.chains[t])
      kernels::inplace_cast_range(data, r.begin, r.end, from, to);
  });
}

}  // namespace

void inplace_cast(const comm::Parts* c, void* data, int64_t count, DType from, DType to) {
  check_args(data, count, from, to);
  std::optional<ContextEntry> entry;
  if (c != nullptr) {
    c->life().check_usable(kOp);
    entry.emplace(*c, kOp);
  }
  if (count == 0) return;
  const int threads = c == nullptr ? 1 : std::max(1, c->runtime().num_compute_workers());
  if (threads == 1 || count < kMinParallel) {
    kernels::inplace_cast_range(data, 0, count, from, to);
    return;
  }
  // One round of work for the workers: kernels::inplace_cast_plan argues why its chains can run
  // concurrently without any synchronisation between them.
  int doublings = 0;
  while (doublings < kMaxDoublings && (count >> (doublings + 1)) >= kMinSerial) ++doublings;
  const kernels::CastPlan plan = kernels::inplace_cast_plan(count, from, to, threads, doublings);
  const kernels::CastRange serial = plan.serial;
  if (plan.serial_first) kernels::inplace_cast_range(data, serial.begin, serial.end, from, to);
  run_chains(*c, data, plan, from, to);
  if (!plan.serial_first) kernels::inplace_cast_range(data, serial.begin, serial.end, from, to);
}

}  // namespace fluxcpp::ops

namespace fluxcpp {

void inplace_cast(const Context* ctx, void* data, int64_t count, DType from, DType to) {
  if (ctx != nullptr && ctx->impl() == nullptr)
    raise(Errc::kInvalidUsage, "inplace_cast: the context was moved from");
  ops::inplace_cast(ctx == nullptr ? nullptr : comm::parts_of(ctx->impl()).get(), data, count, from,
                    to);
}

}  // namespace fluxcpp
