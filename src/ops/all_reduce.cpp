#include "ops/all_reduce.hpp"

#include <fmt/format.h>

#include <cstring>

#include "error_util.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/options.hpp"

namespace fluxcpp {
namespace detail {

void AllReduceImpl::create(const comm::Parts& c, const std::string& local_error) {
  const AllReduceOptions o = opts_;
  ops::agree_options(c, kOp, local_error,
                     {ops::dtype("dtype", o.dtype), ops::dim("max_count", o.max_count)}, [&] {
                       FLUXCPP_CHECK_ARG(o.max_count <= (int64_t{1} << 40) / 8,
                                         "{}: max_count={} is too large", kOp, o.max_count);
                     });
  reduce_ = ops::AllReduceExchange(c, links_, layout_, o.max_count, o.dtype, o.dtype);
  make_core(
      ops::OpCore::Spec::of(kOp, {"count"}).releasing().with_payload(reduce_.payload_bytes()));
}

void AllReduceImpl::forward(const void* input, int64_t count, void* output) {
  ops::CallDescriptor d;
  d.fields = {count, 0, 0, 0};
  d.error = ops::check_count(*ctx_, kOp, "count", count, opts_.max_count,
                             {{"input", input}, {"output", output}});
  const std::size_t bytes = d.error.empty() ? count * dtype_size(opts_.dtype) : 0;
  if (d.error.empty() && input != output && ops::overlaps(input, output, bytes))
    d.error = fmt::format("{}: input and output overlap without being equal (rank {})", kOp,
                          ctx_->topo().world_rank());
  const bool zero_copy =
      zero_copy_.check(*core_, reduce_.input_slot(), input, bytes, {{output, bytes}}, d);
  if (d.error.empty()) schedule_ = plan(count);
  if (d.error.empty() && schedule_ == Schedule::kLatency) {  // it rides on the handshake
    d.payload = [&](char* slot) { std::memcpy(slot, input, bytes); };
    d.payload_len = bytes;
  }
  // One exchange runs both schedules (it sums the payloads on the latency path).
  core_->run(ops::Path::kFused, d, count == 0, [&](const ops::Call&) {
    reduce_.run(*core_, static_cast<const char*>(input), zero_copy, count,
                static_cast<char*>(output));
  });
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(AllReduce, AllReduceOptions);
FLUXCPP_PUBLIC_INPUT_BUFFER(AllReduce)

void AllReduce::forward(const void* input, int64_t count, void* output) {
  ops::checked(impl_).forward(input, count, output);
}

}  // namespace fluxcpp
