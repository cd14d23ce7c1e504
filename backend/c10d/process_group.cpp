// ProcessGroupFluxcpp: each call checked on the caller's thread, then queued as one engine call.
#include "process_group.hpp"

#include <cstring>
#include <numeric>

#include "bootstrap.hpp"
#include "tensor_args.hpp"
#include "work.hpp"

namespace fluxcpp::backend {
namespace {

using c10d::OpType;

// Copies `parts` (each `bytes` long) into one block, or back out of it.
void pack(const std::vector<at::Tensor>& parts, char* dst, int64_t bytes) {
  for (std::size_t i = 0; i < parts.size(); ++i) std::memcpy(dst + i * bytes, bytes_of(parts[i]), bytes);
}
void unpack(const char* src, const std::vector<at::Tensor>& parts, int64_t bytes) {
  for (std::size_t i = 0; i < parts.size(); ++i) std::memcpy(bytes_of(parts[i]), src + i * bytes, bytes);
}
// Whether parts lie back to back in memory (a view of one tensor): then no staging.
bool adjacent(const std::vector<at::Tensor>& parts, int64_t bytes) {
  for (std::size_t i = 1; i < parts.size(); ++i)
    if (bytes_of(parts[i]) != bytes_of(parts[0]) + i * bytes) return false;
  return true;
}

}  // namespace

ProcessGroupFluxcpp::ProcessGroupFluxcpp(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), timeout_(timeout) {
  coll_ = std::make_unique<Collectives>(make_context(store, rank, size, timeout), rank, size);
  mailbox_ = std::make_unique<Mailbox>(coll_->context(), rank, size);
  exec_ = std::make_shared<Executor>(mailbox_.get());
}

ProcessGroupFluxcpp::~ProcessGroupFluxcpp() { shutdown(); }

void ProcessGroupFluxcpp::shutdown() {
  if (shut_.exchange(true)) return;
  exec_->stop();
  mailbox_.reset();
  coll_.reset();
}

void ProcessGroupFluxcpp::check_open(const char* name) const {
  TORCH_CHECK(!shut_.load(), "ProcessGroupFluxcpp::", name, ": the group was shut down "
              "(destroy_process_group): make a new one");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFluxcpp::enqueue(OpType type, const char* name,
                                                           CallSpec spec,
                                                           std::function<void()> body,
                                                           Tensors outputs, Carry carry) {
  check_open(name);
  auto work = c10::make_intrusive<FluxWork>(rank_, type, std::move(outputs), exec_);
  auto task = std::make_shared<Task>();
  task->name = name;
  spec.name = name;
  ++calls_;
  const bool carried = size_ > 1 && carry.finish && carry.bytes >= 0 &&
                       carry.bytes <= coll_->carry_max();
  task->run = [this, name, spec = std::move(spec), body = std::move(body), carried,
               carry = std::move(carry)] {
    try {  // the torch call named first: its engine call (all_to_all for gather...) follows
      if (carried) {  // every rank made this call, and (on every rank) its data came with it
        const std::vector<const char*>& blocks =
            coll_->agree_carrying(spec, carry.data, carry.bytes, carry.coarse);
        if (!blocks.empty()) return carry.finish(blocks);
        return body();  // too large on some rank: the call's own exchange
      }
      coll_->agree(spec);  // every rank made this call, before a byte moves
      body();
    } catch (const Failure& f) {
      throw Failure(f.status(), std::string("ProcessGroupFluxcpp::") + name + ": " + f.what());
    }
  };
  work->bind(task);
  exec_->submit(task);
  return work;
}

auto ProcessGroupFluxcpp::broadcast(Tensors& ts, const c10d::BroadcastOptions& o) -> Ptr<Work> {
  const at::Tensor& t = single(ts, "broadcast");
  check_rank(o.rootRank, size_, "broadcast", "rootRank");
  const int root = static_cast<int>(o.rootRank);
  const int64_t b = nbytes(t);
  Carry carry{bytes_of(t), b, [this, t, root, b](const std::vector<const char*>& blocks) {
    if (rank_ != root && b > 0) std::memcpy(bytes_of(t), blocks[root], static_cast<std::size_t>(b));
  }};
  return enqueue(OpType::BROADCAST, "broadcast", spec_of(t, "", root),
                 [this, t, root] { coll_->broadcast(bytes_of(t), nbytes(t), root); }, ts,
                 std::move(carry));
}

auto ProcessGroupFluxcpp::allreduce(Tensors& ts, const c10d::AllreduceOptions& o) -> Ptr<Work> {
  const at::Tensor& t = single(ts, "allreduce");
  const Reduction r = reduction_of(t, o.reduceOp, "allreduce");
  // Small: every rank's tensor travels with the call check and each rank reduces them in rank
  // order (the library's reduce_blocks), where that is the order the op path has.
  check_open("allreduce");  // before coll_ is asked
  Carry carry{bytes_of(t), coll_->rank_order(r.scalar, r.reduce) ? nbytes(t) : -1,
              [this, t, r](const std::vector<const char*>& blocks) {
    if (r.count > 0)
      reduce_blocks(r.scalar, r.reduce, reinterpret_cast<const void* const*>(blocks.data()),
                    size_, r.count, bytes_of(t), size_);
  }};
  return enqueue(OpType::ALLREDUCE, "allreduce", spec_of(t, reduce_name(r.reduce)), [this, t, r] {
    coll_->all_reduce(r.scalar, r.reduce, bytes_of(t), bytes_of(t), r.count);
  }, ts, std::move(carry));
}

auto ProcessGroupFluxcpp::allreduce_coalesced(Tensors& ts,
                                              const c10d::AllreduceCoalescedOptions& o)
    -> Ptr<Work> {
  std::vector<Reduction> rs;
  for (const auto& t : ts) {
    check_tensor(t, "allreduce_coalesced", "tensor");
    rs.push_back(reduction_of(t, o.reduceOp, "allreduce_coalesced"));
  }
  return enqueue(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced",
                 spec_of(ts, rs.empty() ? "" : reduce_name(rs[0].reduce)), [this, ts, rs] {
    for (std::size_t i = 0; i < ts.size(); ++i)
      coll_->all_reduce(rs[i].scalar, rs[i].reduce, bytes_of(ts[i]), bytes_of(ts[i]), rs[i].count);
  }, ts);
}

auto ProcessGroupFluxcpp::reduce(Tensors& ts, const c10d::ReduceOptions& o) -> Ptr<Work> {
  const at::Tensor& t = single(ts, "reduce");
  check_rank(o.rootRank, size_, "reduce", "rootRank");
  const Reduction r = reduction_of(t, o.reduceOp, "reduce");
  // Off the root the result goes to a scratch tensor: the caller's stays as it was.
  at::Tensor out = o.rootRank == rank_ ? t : at::empty_like(t);
  return enqueue(OpType::REDUCE, "reduce",
                 spec_of(t, reduce_name(r.reduce), static_cast<int>(o.rootRank)),
                 [this, t, out, r] {
    coll_->all_reduce(r.scalar, r.reduce, bytes_of(t), bytes_of(out), r.count);
  }, ts);
}

auto ProcessGroupFluxcpp::allgather(std::vector<Tensors>& outs, Tensors& ins,
                                    const c10d::AllgatherOptions&) -> Ptr<Work> {
  const at::Tensor& in = single(ins, "allgather");
  TORCH_CHECK(outs.size() == 1, "ProcessGroupFluxcpp::allgather: expects one output list, got ",
              outs.size());
  check_list(outs[0], in, size_, "allgather", "output_tensor_list");
  Tensors parts = outs[0];
  const int64_t nb = nbytes(in);
  Carry carry{bytes_of(in), nb, [this, parts, nb](const std::vector<const char*>& blocks) {
    for (int t = 0; t < size_; ++t)
      if (nb > 0) std::memcpy(bytes_of(parts[t]), blocks[t], static_cast<std::size_t>(nb));
  }};
  return enqueue(OpType::ALLGATHER, "allgather", spec_of(in), [this, in, parts] {
    const int64_t b = nbytes(in);
    if (adjacent(parts, b)) return coll_->all_gather(bytes_of(in), b, bytes_of(parts[0]));
    if (size_ == 2) {  // the peer's block straight into its tensor (the op's single copy)
      const int peer = 1 - rank_;
      std::vector<int64_t> send(2, 0), recv(2, 0);
      send[peer] = recv[peer] = b;
      coll_->all_to_all(bytes_of(in), send.data(), bytes_of(parts[peer]), recv.data(), b);
      if (b > 0 && bytes_of(parts[rank_]) != bytes_of(in))
        std::memmove(bytes_of(parts[rank_]), bytes_of(in), b);
      return;
    }
    char* all = coll_->staging(static_cast<std::size_t>(b) * size_);
    coll_->all_gather(bytes_of(in), b, all);
    unpack(all, parts, b);
  }, outs[0], std::move(carry));
}

auto ProcessGroupFluxcpp::_allgather_base(at::Tensor& out, at::Tensor& in,
                                          const c10d::AllgatherOptions&) -> Ptr<Work> {
  check_tensor(in, "_allgather_base", "input");
  check_tensor(out, "_allgather_base", "output");
  TORCH_CHECK(out.scalar_type() == in.scalar_type(), "ProcessGroupFluxcpp::_allgather_base: "
              "output is ", out.scalar_type(), ", input ", in.scalar_type());
  TORCH_CHECK(out.numel() == in.numel() * size_, "ProcessGroupFluxcpp::_allgather_base: output "
              "has ", out.numel(), " elements; expected world size ", size_, " x input's ",
              in.numel());
  const int64_t b = nbytes(in);
  Carry carry{bytes_of(in), b, [this, out, b](const std::vector<const char*>& blocks) {
    for (int t = 0; t < size_; ++t)
      if (b > 0) std::memcpy(bytes_of(out) + b * t, blocks[t], static_cast<std::size_t>(b));
  }};
  return enqueue(OpType::_ALLGATHER_BASE, "_allgather_base", spec_of(in),
                 [this, in, out] { coll_->all_gather(bytes_of(in), nbytes(in), bytes_of(out)); },
                 {out}, std::move(carry));
}

auto ProcessGroupFluxcpp::allgather_coalesced(std::vector<Tensors>& outs, Tensors& ins,
                                              const c10d::AllgatherOptions&) -> Ptr<Work> {
  // outs[r][i]: rank r's i-th input (gloo's layout).
  TORCH_CHECK(static_cast<int>(outs.size()) == size_, "ProcessGroupFluxcpp::allgather_coalesced: ",
              outs.size(), " output lists; the group has ", size_, " ranks");
  Tensors flat;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(outs[r].size() == ins.size(), "ProcessGroupFluxcpp::allgather_coalesced: output "
                "list ", r, " has ", outs[r].size(), " tensors for ", ins.size(), " inputs");
    flat.insert(flat.end(), outs[r].begin(), outs[r].end());
  }
  for (std::size_t i = 0; i < ins.size(); ++i) {
    check_tensor(ins[i], "allgather_coalesced", "input");
    Tensors column;
    for (int r = 0; r < size_; ++r) column.push_back(outs[r][i]);
    check_list(column, ins[i], size_, "allgather_coalesced", "output_tensor_lists[r][i]");
  }
  std::vector<Tensors> lists = outs;
  return enqueue(OpType::ALLGATHER_COALESCED, "allgather_coalesced", spec_of(ins),
                 [this, ins, lists] {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const int64_t b = nbytes(ins[i]);
      char* all = coll_->staging(static_cast<std::size_t>(b) * size_);
      coll_->all_gather(bytes_of(ins[i]), b, all);
      for (int r = 0; r < size_; ++r)
        std::memcpy(bytes_of(lists[r][i]), all + static_cast<std::size_t>(r) * b, b);
    }
  }, flat);
}

auto ProcessGroupFluxcpp::gather(std::vector<Tensors>& outs, Tensors& ins,
                                 const c10d::GatherOptions& o) -> Ptr<Work> {
  const at::Tensor& in = single(ins, "gather");
  check_rank(o.rootRank, size_, "gather", "rootRank");
  const int root = static_cast<int>(o.rootRank);
  Tensors parts;
  if (rank_ == root) {
    TORCH_CHECK(outs.size() == 1, "ProcessGroupFluxcpp::gather: the root expects one output "
                "list, got ", outs.size());
    check_list(outs[0], in, size_, "gather", "gather_list");
    parts = outs[0];
  } else {
    TORCH_CHECK(outs.empty() || outs[0].empty(), "ProcessGroupFluxcpp::gather: rank ", rank_,
                " is not the root (", root, ") and must pass no gather_list");
  }
  return enqueue(OpType::GATHER, "gather", spec_of(in, "", root), [this, in, parts, root] {
    const int64_t b = nbytes(in);
    if (parts.empty()) return coll_->gather(bytes_of(in), b, nullptr, root);
    char* all = coll_->staging(static_cast<std::size_t>(b) * size_);
    coll_->gather(bytes_of(in), b, all, root);
    unpack(all, parts, b);
  }, parts);
}

auto ProcessGroupFluxcpp::scatter(Tensors& outs, std::vector<Tensors>& ins,
                                  const c10d::ScatterOptions& o) -> Ptr<Work> {
  const at::Tensor& out = single(outs, "scatter");
  check_rank(o.rootRank, size_, "scatter", "rootRank");
  const int root = static_cast<int>(o.rootRank);
  Tensors parts;
  if (rank_ == root) {
    TORCH_CHECK(ins.size() == 1, "ProcessGroupFluxcpp::scatter: the root expects one input "
                "list, got ", ins.size());
    check_list(ins[0], out, size_, "scatter", "scatter_list");
    parts = ins[0];
  } else {
    TORCH_CHECK(ins.empty() || ins[0].empty(), "ProcessGroupFluxcpp::scatter: rank ", rank_,
                " is not the root (", root, ") and must pass no scatter_list");
  }
  return enqueue(OpType::SCATTER, "scatter", spec_of(out, "", root), [this, out, parts, root] {
    const int64_t b = nbytes(out);
    char* all = parts.empty() ? nullptr : coll_->staging(static_cast<std::size_t>(b) * size_);
    if (all != nullptr) pack(parts, all, b);
    coll_->scatter(all, b, bytes_of(out), root);
  }, outs);
}

auto ProcessGroupFluxcpp::reduce_scatter(Tensors& outs, std::vector<Tensors>& ins,
                                         const c10d::ReduceScatterOptions& o) -> Ptr<Work> {
  const at::Tensor& out = single(outs, "reduce_scatter");
  TORCH_CHECK(ins.size() == 1, "ProcessGroupFluxcpp::reduce_scatter: expects one input list, "
              "got ", ins.size());
  check_list(ins[0], out, size_, "reduce_scatter", "input_list");
  const Reduction r = reduction_of(out, o.reduceOp, "reduce_scatter");
  Tensors parts = ins[0];
  return enqueue(OpType::REDUCE_SCATTER, "reduce_scatter", spec_of(out, reduce_name(r.reduce)),
                 [this, out, parts, r] {
    const int64_t b = nbytes(out);
    if (adjacent(parts, b))
      return coll_->reduce_scatter(r.scalar, r.reduce, bytes_of(parts[0]), bytes_of(out), r.count);
    char* all = coll_->staging(static_cast<std::size_t>(b) * size_);
    pack(parts, all, b);
    coll_->reduce_scatter(r.scalar, r.reduce, all, bytes_of(out), r.count);
  }, outs);
}

auto ProcessGroupFluxcpp::_reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                               const c10d::ReduceScatterOptions& o)
    -> Ptr<Work> {
  check_tensor(in, "_reduce_scatter_base", "input");
  check_tensor(out, "_reduce_scatter_base", "output");
  TORCH_CHECK(out.scalar_type() == in.scalar_type(), "ProcessGroupFluxcpp::_reduce_scatter_base:"
              " output is ", out.scalar_type(), ", input ", in.scalar_type());
  TORCH_CHECK(in.numel() == out.numel() * size_, "ProcessGroupFluxcpp::_reduce_scatter_base: "
              "input has ", in.numel(), " elements; expected world size ", size_,
              " x output's ", out.numel());
  const Reduction r = reduction_of(out, o.reduceOp, "_reduce_scatter_base");
  check_open("_reduce_scatter_base");  // before coll_ is asked
  return enqueue(OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base",
                 spec_of(out, reduce_name(r.reduce)), [this, in, out, r] {
    coll_->reduce_scatter(r.scalar, r.reduce, bytes_of(in), bytes_of(out), r.count);
  }, {out}, carry_reduce_scatter(in, out, r));
}

auto ProcessGroupFluxcpp::alltoall_base(at::Tensor& out, at::Tensor& in,
                                        std::vector<int64_t>& out_splits,
                                        std::vector<int64_t>& in_splits,
                                        const c10d::AllToAllOptions&) -> Ptr<Work> {
  check_tensor(in, "alltoall_base", "input");
  check_tensor(out, "alltoall_base", "output");
  TORCH_CHECK(out.scalar_type() == in.scalar_type(), "ProcessGroupFluxcpp::alltoall_base: "
              "output is ", out.scalar_type(), ", input ", in.scalar_type());
  // Bytes per row (dim 0) and per-rank row counts; empty splits: equal parts.
  auto rows = [&](const at::Tensor& t, std::vector<int64_t> splits, const char* what) {
    const int64_t n0 = t.dim() == 0 ? 1 : t.size(0);
    if (splits.empty()) {
      TORCH_CHECK(n0 % size_ == 0, "ProcessGroupFluxcpp::alltoall_base: ", what, " has ", n0,
                  " rows, not divisible by the world size ", size_);
      splits.assign(size_, n0 / size_);
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, "ProcessGroupFluxcpp::alltoall_base: ",
                what, " split sizes have ", splits.size(), " entries; the group has ", size_,
                " ranks");
    TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) == n0,
                "ProcessGroupFluxcpp::alltoall_base: ", what, " split sizes sum to ",
                std::accumulate(splits.begin(), splits.end(), int64_t{0}), ", not its ", n0,
                " rows");
    const int64_t row = n0 == 0 ? 0 : nbytes(t) / n0;
    for (auto& s : splits) s *= row;
    return splits;
  };
  std::vector<int64_t> send = rows(in, in_splits, "input");
  std::vector<int64_t> recv = rows(out, out_splits, "output");
  // The largest message is agreed first (one small gather): a rank that passes no splits and
  // one that passes uneven ones may legally meet in one call.
  // Split sizes differ from rank to rank by design: the dtype is what must agree.
  CallSpec spec;
  spec.dtype = dtype_name(in);
  return enqueue(OpType::ALLTOALL_BASE, "alltoall_base", spec, [this, in, out, send, recv] {
    coll_->all_to_all(bytes_of(in), send.data(), bytes_of(out), recv.data(), -1);
  }, {out}, carry_all_to_all(in, out, send, recv));
}

auto ProcessGroupFluxcpp::alltoall(Tensors& outs, Tensors& ins, const c10d::AllToAllOptions&)
    -> Ptr<Work> {
  TORCH_CHECK(static_cast<int>(ins.size()) == size_ && static_cast<int>(outs.size()) == size_,
              "ProcessGroupFluxcpp::alltoall: ", ins.size(), " inputs and ", outs.size(),
              " outputs; the group has ", size_, " ranks");
  std::vector<int64_t> send(size_), recv(size_);
  for (int t = 0; t < size_; ++t) {
    check_tensor(ins[t], "alltoall", "input_tensor_list");
    check_tensor(outs[t], "alltoall", "output_tensor_list");
    TORCH_CHECK(ins[t].scalar_type() == ins[0].scalar_type() &&
                    outs[t].scalar_type() == ins[0].scalar_type(),
                "ProcessGroupFluxcpp::alltoall: every tensor must be ", ins[0].scalar_type());
    send[t] = nbytes(ins[t]), recv[t] = nbytes(outs[t]);
  }
  CallSpec spec;
  spec.dtype = dtype_name(ins[0]);
  spec.parts = static_cast<int64_t>(ins.size());
  return enqueue(OpType::ALLTOALL, "alltoall", spec, [this, ins, outs, send, recv] {
    const int64_t sent = std::accumulate(send.begin(), send.end(), int64_t{0});
    const int64_t got = std::accumulate(recv.begin(), recv.end(), int64_t{0});
    char* a = coll_->staging(static_cast<std::size_t>(sent + got));
    char* b = a + sent;
    int64_t off = 0;
    for (int t = 0; t < size_; off += send[t], ++t) std::memcpy(a + off, bytes_of(ins[t]), send[t]);
    coll_->all_to_all(a, send.data(), b, recv.data(), -1);
    off = 0;
    for (int t = 0; t < size_; off += recv[t], ++t) std::memcpy(bytes_of(outs[t]), b + off, recv[t]);
  }, outs);
}

auto ProcessGroupFluxcpp::barrier(const c10d::BarrierOptions&) -> Ptr<Work> {
  return enqueue(OpType::BARRIER, "barrier", CallSpec{}, [this] { coll_->barrier(); }, {});
}

}  // namespace fluxcpp::backend
