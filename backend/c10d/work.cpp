// FluxWork: completion from the executor, wait with caller help, the future.
#include "work.hpp"

#include <ATen/core/jit_type.h>

#include "../engine/completions.hpp"

namespace fluxcpp::backend {

FluxWork::FluxWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                   std::shared_ptr<Executor> exec)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      exec_(std::move(exec)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

void FluxWork::bind(const std::shared_ptr<Task>& task) {
  task_ = task;
  c10::intrusive_ptr<FluxWork> self = c10::intrusive_ptr<FluxWork>::reclaim_copy(this);
  task->done = [self](std::exception_ptr e, bool waiter) { self->complete(e, waiter); };
}

void FluxWork::complete(std::exception_ptr e, bool waiter) {
  if (task_ && task_->transfer) source_rank_ = task_->transfer->peer;
  finish(e);  // completed_, exception_, notifies wait()
  auto mark = [future = future_, outputs = outputs_, e] {
    if (e)
      future->setError(e);
    else
      future->markCompleted(c10::IValue(outputs));
  };
  if (waiter)
    mark();  // the waiting thread, holding nothing of the group: its callbacks may block
  else
    post_completion(std::move(mark));
}

bool FluxWork::wait(std::chrono::milliseconds timeout) {
  // Once finished, the executor (and its group) may be gone: only an unfinished task asks it.
  // With a timeout the caller does not run the call itself (it would block in it until the
  // group's own timeout): the worker runs it, and the wait raises at `timeout` as torch's own
  // backends do. (Zero is torch's kNoTimeout: wait for as long as it takes.)
  const bool no_timeout = timeout == std::chrono::milliseconds::zero();
  if (no_timeout && task_ && !task_->finished.load(std::memory_order_acquire)) exec_->help(task_);
  return c10d::Work::wait(timeout);
}

}  // namespace fluxcpp::backend
