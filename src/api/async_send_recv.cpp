// The public class AsyncSendRecv: a thin facade over the op (src/ops/async_send_recv.cpp).
#include "ops/async_send_recv.hpp"
#include "ops/core/pimpl.hpp"

namespace fluxcpp {

AsyncSendRecv::AsyncSendRecv(const Context& ctx, const AsyncSendRecvOptions& options)
    : impl_(std::make_unique<detail::AsyncSendRecvImpl>(ctx.impl(), options)) {}
FLUXCPP_PUBLIC_OP(AsyncSendRecv, AsyncSendRecvOptions, "async_send_recv");

uint64_t AsyncSendRecv::send(int dst, const void* data, int64_t m) {
  return ops::checked(impl_, "async_send_recv").send(dst, data, m, false);
}
uint64_t AsyncSendRecv::isend(int dst, const void* data, int64_t m) {
  return ops::checked(impl_, "async_send_recv").send(dst, data, m, true);
}
void AsyncSendRecv::send_wait(int dst, uint64_t seq) {
  ops::checked(impl_, "async_send_recv").send_wait(dst, seq);
}
bool AsyncSendRecv::send_test(int dst, uint64_t seq) {
  return ops::checked(impl_, "async_send_recv").send_test(dst, seq);
}
int64_t AsyncSendRecv::recv(int src, void* out, int64_t out_rows) {
  return ops::checked(impl_, "async_send_recv").recv(src, out, out_rows);
}
bool AsyncSendRecv::send_ready(int dst) {
  return ops::checked(impl_, "async_send_recv").send_ready(dst);
}

int64_t AsyncSendRecv::probe(int src) {
  return ops::checked(impl_, "async_send_recv").probe(src);
}
void AsyncSendRecv::close() {
  if (impl_) impl_->close();
}
const std::vector<int>& AsyncSendRecv::peers() const {
  return ops::checked(impl_, "async_send_recv").peers();
}

}  // namespace fluxcpp
