// The C ABI of async_send_recv: thin wrappers over the op (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/async_send_recv.hpp"

struct fluxcpp_async_send_recv_s {
  std::unique_ptr<fluxcpp::detail::AsyncSendRecvImpl> impl;
};

using namespace fluxcpp::capi;

extern "C" {

fluxcpp_status_t fluxcpp_async_send_recv_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n,
                                                fluxcpp_dtype_t dtype, int num_slots, int num_peers,
                                                const int* peers, fluxcpp_async_send_recv_t* op) {
  fluxcpp::AsyncSendRecvOptions o;
  o.max_m = max_m;
  o.n = n;
  o.dtype = to_dtype(dtype);
  o.num_slots = num_slots;
  // A rank-local problem with the list still takes part in the collective create.
  std::string local;
  if (peers != nullptr && num_peers >= 0) {
    o.peers = std::vector<int>(peers, peers + num_peers);
  } else if (num_peers < 0) {
    local = "num_peers=" + std::to_string(num_peers) + " must be >= 0";
  } else if (num_peers > 0) {
    local = "peers is NULL with num_peers=" + std::to_string(num_peers);
  }
  if (op == nullptr) local = "the op out-pointer is NULL";
  if (op != nullptr) *op = nullptr;
  if (ctx == nullptr) return null_arg("fluxcpp_async_send_recv_create", "ctx");
  return guarded([&] {
    auto impl = std::make_unique<fluxcpp::detail::AsyncSendRecvImpl>(ctx->impl, o, local);
    *op = new fluxcpp_async_send_recv_s{std::move(impl)};
  });
}

fluxcpp_status_t fluxcpp_async_send_recv_send(fluxcpp_async_send_recv_t op, int dst,
                                              const void* data, int64_t m, uint64_t* seq) {
  if (op == nullptr) return null_arg("fluxcpp_async_send_recv_send", "op");
  return guarded([&] {
    const uint64_t q = op->impl->send(dst, data, m, false);
    if (seq != nullptr) *seq = q;
  });
}

fluxcpp_status_t fluxcpp_async_send_recv_isend(fluxcpp_async_send_recv_t op, int dst,
                                               const void* data, int64_t m, uint64_t* seq) {
  if (op == nullptr) return null_arg("fluxcpp_async_send_recv_isend", "op");
  return guarded([&] {
    const uint64_t q = op->impl->send(dst, data, m, true);
    if (seq != nullptr) *seq = q;
  });
}

fluxcpp_status_t fluxcpp_async_send_recv_send_wait(fluxcpp_async_send_recv_t op, int dst,
                                                   uint64_t seq) {
  if (op == nullptr) return null_arg("fluxcpp_async_send_recv_send_wait", "op");
  return guarded([&] { op->impl->send_wait(dst, seq); });
}

fluxcpp_status_t fluxcpp_async_send_recv_send_test(fluxcpp_async_send_recv_t op, int dst,
                                                   uint64_t seq, int* done) {
  if (op == nullptr) return null_arg("fluxcpp_async_send_recv_send_test", "op");
  if (done == nullptr) return null_arg("fluxcpp_async_send_recv_send_test", "done");
  *done = 0;
  return guarded([&] { *done = op->impl->send_test(dst, seq) ? 1 : 0; });
}

fluxcpp_status_t fluxcpp_async_send_recv_recv(fluxcpp_async_send_recv_t op, int src, void* out,
                                              int64_t out_rows, int64_t* m) {
  if (op == nullptr) return null_arg("fluxcpp_async_send_recv_recv", "op");
  return guarded([&] {
    const int64_t rows = op->impl->recv(src, out, out_rows);
    if (m != nullptr) *m = rows;
  });
}

fluxcpp_status_t fluxcpp_async_send_recv_probe(fluxcpp_async_send_recv_t op, int src, int64_t* m) {
  if (op == nullptr) return null_arg("fluxcpp_async_send_recv_probe", "op");
  if (m == nullptr) return null_arg("fluxcpp_async_send_recv_probe", "m");
  *m = -1;
  return guarded([&] { *m = op->impl->probe(src); });
}

fluxcpp_status_t fluxcpp_async_send_recv_destroy(fluxcpp_async_send_recv_t op) {
  if (op == nullptr) return FLUXCPP_SUCCESS;
  std::unique_ptr<fluxcpp_async_send_recv_s> holder(op);  // freed whatever happens
  return guarded([&] { holder->impl->close(); });
}

}  // extern "C"
