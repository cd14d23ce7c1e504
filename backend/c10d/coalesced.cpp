// ProcessGroupFluxcpp's calls on lists of whole tensors (torch 2.x's coalesced all_gather and
// reduce_scatter, which the functional collectives and DTensor issue): one Work for the list,
// one agreement of the call, then each pair in order on the group's ops.
#include "process_group.hpp"
#include "tensor_args.hpp"
#include "work.hpp"

namespace fluxcpp::backend {
namespace {

// outs[i] must hold `factor` x ins[i]'s elements (all_gather) or ins[i] `factor` x outs[i]'s
// (reduce_scatter), same dtype, contiguous.
void check_pairs(const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins,
                 int size, bool gather, const char* name) {
  TORCH_CHECK(outs.size() == ins.size(), "ProcessGroupFluxcpp::", name, ": ", outs.size(),
              " outputs for ", ins.size(), " inputs");
  for (std::size_t i = 0; i < ins.size(); ++i) {
    check_tensor(ins[i], name, "inputs[i]");
    check_tensor(outs[i], name, "outputs[i]");
    TORCH_CHECK(outs[i].scalar_type() == ins[i].scalar_type(), "ProcessGroupFluxcpp::", name,
                ": outputs[", i, "] is ", outs[i].scalar_type(), ", inputs[", i, "] ",
                ins[i].scalar_type());
    const int64_t big = gather ? outs[i].numel() : ins[i].numel();
    const int64_t small = gather ? ins[i].numel() : outs[i].numel();
    TORCH_CHECK(big == small * size, "ProcessGroupFluxcpp::", name, ": ",
                gather ? "outputs[" : "inputs[", i, "] has ", big, " elements; expected world "
                "size ", size, " x ", gather ? "inputs[" : "outputs[", i, "]'s ", small);
  }
}

}  // namespace

auto ProcessGroupFluxcpp::allgather_into_tensor_coalesced(Tensors& outs, Tensors& ins,
                                                          const c10d::AllgatherOptions&)
    -> Ptr<Work> {
  const char* name = "allgather_into_tensor_coalesced";
  check_pairs(outs, ins, size_, true, name);
  return enqueue(c10d::OpType::COALESCED, name, spec_of(ins), [this, outs, ins] {
    for (std::size_t i = 0; i < ins.size(); ++i)
      coll_->all_gather(bytes_of(ins[i]), nbytes(ins[i]), bytes_of(outs[i]));
  }, outs);
}

auto ProcessGroupFluxcpp::reduce_scatter_tensor_coalesced(Tensors& outs, Tensors& ins,
                                                          const c10d::ReduceScatterOptions& o)
    -> Ptr<Work> {
  const char* name = "reduce_scatter_tensor_coalesced";
  check_pairs(outs, ins, size_, false, name);
  std::vector<Reduction> rs;
  for (const auto& t : outs) rs.push_back(reduction_of(t, o.reduceOp, name));
  return enqueue(c10d::OpType::COALESCED, name,
                 spec_of(outs, rs.empty() ? "" : reduce_name(rs[0].reduce)), [this, outs, ins, rs] {
    for (std::size_t i = 0; i < ins.size(); ++i)
      coll_->reduce_scatter(rs[i].scalar, rs[i].reduce, bytes_of(ins[i]), bytes_of(outs[i]),
                            rs[i].count);
  }, outs);
}

}  // namespace fluxcpp::backend
