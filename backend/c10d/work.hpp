// The Work of one call: completed by the executor (on whichever thread ran it), waited on by the
// caller, and a Future for DDP's communication hooks.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>

#include "../engine/executor.hpp"

namespace fluxcpp::backend {

class FluxWork : public c10d::Work {
 public:
  FluxWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, Executor* exec);
  // Binds the task: its completion finishes this Work and its future.
  void bind(const std::shared_ptr<Task>& task);

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  int sourceRank() const override { return source_rank_; }
  void set_source_rank(int r) { source_rank_ = r; }

 private:
  void complete(std::exception_ptr e);

  std::vector<at::Tensor> outputs_;
  Executor* exec_;
  std::shared_ptr<Task> task_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  int source_rank_ = -1;
};

}  // namespace fluxcpp::backend
