#include "ops/reduce_scatter.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

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
  if (links_.hosts() == 1) {
    // One host: the shares go out chunk by chunk, and each chunk of this rank's block is summed
    // one chunk behind, while the peers' copies of it are still in the shared cache.
    const std::size_t esz = dtype_size(opts_.dtype);
    const int64_t step = std::max<int64_t>(
        1, static_cast<int64_t>(ctx_->runtime().config().chunk_bytes / esz));
    std::vector<std::pair<int, ops::Outbox>> outs;
    for (int t : reduce_.peer_blocks()) outs.emplace_back(t, reduce_.share(t));
    const void* own = in_block(ctx_->topo().world_rank());
    int64_t prev = 0;
    for (int64_t e0 = 0; e0 < count; e0 += step) {
      const int64_t e1 = std::min(count, e0 + step);
      for (const auto& [t, o] : outs) {
        std::memcpy(o.data() + e0 * esz, static_cast<const char*>(in_block(t)) + e0 * esz,
                    static_cast<std::size_t>(e1 - e0) * esz);
        o.publish(static_cast<std::size_t>(e1) * esz);
      }
      reduce_.reduce_host_range(opts_.dtype, prev, e0, own, output);
      prev = e0;
    }
    reduce_.reduce_host_range(opts_.dtype, prev, count, own, output);
    return;
  }
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
