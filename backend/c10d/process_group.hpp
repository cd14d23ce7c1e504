// ProcessGroupFluxcpp: torch.distributed's backend "fluxcpp" (torch 2.x's c10d::Backend).
// It turns each call's tensors into buffers and runs the call on the engine (backend/engine):
// collectives on fluxcpp's ops over the group's context, point to point on its mailbox, all on
// the group's executor, in call order. Every call returns at once with a Work; wait() on a call
// whose turn has come runs it on the waiting thread.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <memory>

#include "../engine/collectives.hpp"
#include "tensor_args.hpp"
#include "../engine/executor.hpp"

namespace fluxcpp::backend {

class ProcessGroupFluxcpp : public c10d::Backend {
 public:
  // Collective over the group: makes the context (bootstrap.hpp), the mailbox and the worker.
  ProcessGroupFluxcpp(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout);
  ~ProcessGroupFluxcpp() override;  // finishes what was submitted, then collective teardown

  const std::string getBackendName() const override { return "fluxcpp"; }
  // The group's context (nullptr once shut down).
  fluxcpp_context_t context() const { return shut_.load() ? nullptr : coll_->context(); }
  // Finishes what was submitted, then the collective teardown (destroy_process_group calls it
  // on every rank); later calls fail saying so. abort() does the same: the teardown is bounded
  // by the group's timeout, never a hang.
  void shutdown() override;
  void abort() override { shutdown(); }
  // Calls issued so far (the collectives, not point to point): the same on every rank.
  uint64_t getSequenceNumberForGroup() override { return calls_.load(); }

  using Work = c10d::Work;
  template <typename T>
  using Ptr = c10::intrusive_ptr<T>;
  using Tensors = std::vector<at::Tensor>;

  Ptr<Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  Ptr<Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  Ptr<Work> allreduce_coalesced(Tensors& tensors,
                                const c10d::AllreduceCoalescedOptions& opts) override;
  Ptr<Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  Ptr<Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                      const c10d::AllgatherOptions& opts) override;
  Ptr<Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                            const c10d::AllgatherOptions& opts) override;
  Ptr<Work> allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                                const c10d::AllgatherOptions& opts) override;
  // coalesced.cpp: lists of whole tensors (the functional collectives').
  Ptr<Work> allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                            const c10d::AllgatherOptions& opts) override;
  Ptr<Work> reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                            const c10d::ReduceScatterOptions& opts) override;
  Ptr<Work> gather(std::vector<Tensors>& outputs, Tensors& inputs,
                   const c10d::GatherOptions& opts) override;
  Ptr<Work> scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                    const c10d::ScatterOptions& opts) override;
  Ptr<Work> reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                           const c10d::ReduceScatterOptions& opts) override;
  Ptr<Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                 const c10d::ReduceScatterOptions& opts) override;
  Ptr<Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                          std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                          const c10d::AllToAllOptions& opts) override;
  Ptr<Work> alltoall(Tensors& outputs, Tensors& inputs,
                     const c10d::AllToAllOptions& opts) override;
  Ptr<Work> barrier(const c10d::BarrierOptions& opts) override;
  // p2p.cpp
  Ptr<Work> send(Tensors& tensors, int dst, int tag) override;
  Ptr<Work> recv(Tensors& tensors, int src, int tag) override;
  Ptr<Work> recvAnysource(Tensors& tensors, int tag) override;

 private:
  // A small call's data that can travel with the call check (at most CallCheck::carry_max()):
  // `finish` completes the call from every rank's bytes instead of the body's own exchange.
  struct Carry {
    const void* data = nullptr;
    int64_t bytes = -1;  // -1: nothing carried
    std::function<void(const std::vector<const char*>& blocks)> finish;
    std::vector<char> owned;  // the data when the call assembles it (data points into it)
    bool coarse = false;      // the ranks' sizes differ by design: coarse size classes
  };
  // A Work whose task runs `body` on the executor (or `carry.finish`, when the data is small
  // enough to travel with the call check); `outputs` become the future's value.
  Ptr<Work> enqueue(c10d::OpType type, const char* name, CallSpec spec, std::function<void()> body,
                    Tensors outputs, Carry carry);
  Ptr<Work> enqueue(c10d::OpType type, const char* name, CallSpec spec, std::function<void()> body,
                    Tensors outputs) {
    return enqueue(type, name, std::move(spec), std::move(body), std::move(outputs), Carry());
  }
  Ptr<Work> transfer(const char* name, bool send, at::Tensor tensor, int peer, int tag);
  // Every rank's whole input travels; each reduces its block in reduce_scatter's own order.
  Carry carry_reduce_scatter(const at::Tensor& in, const at::Tensor& out, const Reduction& r);
  Carry carry_all_to_all(const at::Tensor& in, const at::Tensor& out,
                         const std::vector<int64_t>& send, const std::vector<int64_t>& recv);
  void check_open(const char* name) const;  // raises once shut down

  std::chrono::milliseconds timeout_;
  std::unique_ptr<Collectives> coll_;
  std::unique_ptr<Mailbox> mailbox_;
  std::shared_ptr<Executor> exec_;
  std::atomic<bool> shut_{false};
  std::atomic<uint64_t> calls_{0};
};

}  // namespace fluxcpp::backend
