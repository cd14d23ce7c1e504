// The Work of one call: completed by the executor (on whichever thread ran it), waited on by the
// caller, and a Future for DDP's communication hooks. The future completes on the completion
// pool (engine/completions.hpp), never on the thread that runs the group's calls: a callback
// may issue and wait for another call of the group (PowerSGD's hook does).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>

#include "../engine/executor.hpp"

namespace fluxcpp::backend {

class FluxWork : public c10d::Work {
 public:
  FluxWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
           std::shared_ptr<Executor> exec);
  // Binds the task: its completion finishes this Work and its future.
  void bind(const std::shared_ptr<Task>& task);

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  int sourceRank() const override { return source_rank_; }
  void set_source_rank(int r) { source_rank_ = r; }

 private:
  void complete(std::exception_ptr e, bool waiter);

  std::vector<at::Tensor> outputs_;
  std::shared_ptr<Executor> exec_;  // outlives the group while a Work of it lives
  std::shared_ptr<Task> task_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int source_rank_ = -1;
};

}  // namespace fluxcpp::backend
