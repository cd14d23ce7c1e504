#include "ops/reduce_scatter.hpp"

#include <cstring>

#include "error_util.hpp"
#include "ops/core/create.hpp"
#include "ops/core/op_base.hpp"
#include "ops/core/op_checks.hpp"
#include "ops/core/options.hpp"

namespace fluxcpp {
namespace detail {

void ReduceScatterImpl::create(const comm::Parts& c, const std::string& local_error) {
  const ReduceScatterOptions o = opts_;
  ops::agree_row_options(c, kOp, local_error, o.dtype, "n", o.n, "max_m", o.max_m);
  acc_ = o.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const std::size_t elems = static_cast<std::size_t>(o.max_m / c.topo().world_size()) * o.n;
  reduce_ = ops::ReduceExchange(c, links_, layout_, elems * dtype_size(o.dtype),
                                elems * dtype_size(acc_), ops::needs_data(links_), kOp);
  make_core(ops::OpCore::Spec::of(kOp, {"m"}));
}

void ReduceScatterImpl::forward(const void* input, int64_t m, void* output) {
  ops::CallDescriptor d;
  d.fields = {m, 0, 0, 0};
  d.error = ops::check_forward(*ctx_, kOp, m, opts_.max_m, {{"input", input}, {"output", output}});
  core_->run(ops::Path::kFused, d, m == 0, [&](const ops::Call&) {
    run(static_cast<const char*>(input), m, static_cast<char*>(output));
  });
}

void ReduceScatterImpl::run(const char* input, int64_t m, char* output) {
  const int64_t count = m / ctx_->topo().world_size() * opts_.n;
  const std::size_t blk = static_cast<std::size_t>(count) * dtype_size(opts_.dtype);
  auto in_block = [&](int t) -> const void* { return input + blk * t; };
  reduce_.begin(*core_, blk, static_cast<std::size_t>(count) * dtype_size(acc_));
  // Stage the row blocks a host peer reduces: block t goes to the host rank with t's local rank
  // (t itself on this host; the rank that sums this host's share for t on another host).
  for (int t : reduce_.peer_blocks()) {
    const ops::Outbox share = reduce_.share(t);
    std::memcpy(share.data(), in_block(t), blk);
    share.publish_all();
  }
  reduce_.reduce(opts_.dtype, acc_, opts_.dtype, count, in_block, output);
}

}  // namespace detail

FLUXCPP_PUBLIC_MADE_OP(ReduceScatter, ReduceScatterOptions);

void ReduceScatter::forward(const void* input, int64_t m, void* output) {
  ops::checked(impl_).forward(input, m, output);
}

}  // namespace fluxcpp
