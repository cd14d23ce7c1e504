// ProcessGroupFluxcpp's point-to-point calls: each a transfer on the group's mailbox, run by
// the executor in call order (engine/mailbox.hpp).
#include "process_group.hpp"
#include "tensor_args.hpp"
#include "work.hpp"

namespace fluxcpp::backend {

using c10d::OpType;

c10::intrusive_ptr<c10d::Work> ProcessGroupFluxcpp::transfer(const char* name, bool send,
                                                            at::Tensor t, int peer, int tag) {
  check_open(name);
  check_tensor(t, name, "tensor");
  if (peer >= 0) {
    check_rank(peer, size_, name, send ? "dst" : "src");
    TORCH_CHECK(peer != rank_, "ProcessGroupFluxcpp::", name, ": rank ", rank_,
                " cannot ", send ? "send to" : "receive from", " itself");
  }
  auto work = c10::make_intrusive<FluxWork>(rank_, send ? OpType::SEND : OpType::RECV,
                                            Tensors{t}, exec_);
  auto task = std::make_shared<Task>();
  task->name = name;
  Mailbox::Transfer x;
  x.send = send;
  x.peer = peer;
  x.data = bytes_of(t);
  x.bytes = nbytes(t);
  x.tag = tag;
  x.deadline = std::chrono::steady_clock::now() + timeout_;
  task->transfer = x;
  work->bind(task);
  exec_->submit(task);
  return work;
}

auto ProcessGroupFluxcpp::send(Tensors& ts, int dst, int tag) -> Ptr<Work> {
  TORCH_CHECK(ts.size() == 1, "ProcessGroupFluxcpp::send: expects one tensor, got ", ts.size());
  return transfer("send", true, ts[0], dst, tag);
}

auto ProcessGroupFluxcpp::recv(Tensors& ts, int src, int tag) -> Ptr<Work> {
  TORCH_CHECK(ts.size() == 1, "ProcessGroupFluxcpp::recv: expects one tensor, got ", ts.size());
  return transfer("recv", false, ts[0], src, tag);
}

auto ProcessGroupFluxcpp::recvAnysource(Tensors& ts, int tag) -> Ptr<Work> {
  TORCH_CHECK(ts.size() == 1, "ProcessGroupFluxcpp::recvAnysource: expects one tensor, got ",
              ts.size());
  return transfer("recvAnysource", false, ts[0], -1, tag);
}

}  // namespace fluxcpp::backend
