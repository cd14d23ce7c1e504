// The C ABI of async_send_recv: thin wrappers over the op (src/capi/capi_common.hpp).
#include "capi/capi_common.hpp"
#include "ops/async_send_recv.hpp"

// Its destroy is collective (close), so it is written out below, not by FLUXCPP_CAPI_HANDLE.
struct fluxcpp_async_send_recv_s : fluxcpp::capi::Handle<fluxcpp::detail::AsyncSendRecvImpl> {};

using namespace fluxcpp::capi;

namespace {

// send and isend: *seq (may be NULL) = the message's sequence number.
fluxcpp_status_t send_message(const char* fn, fluxcpp_async_send_recv_t op, int dst,
                              const void* data, int64_t m, uint64_t* seq, bool nonblocking) {
  return call_op(fn, op, [&](auto& impl) {
    const uint64_t q = impl.send(dst, data, m, nonblocking);
    if (seq != nullptr) *seq = q;
  });
}

}  // namespace

extern "C" {

fluxcpp_status_t fluxcpp_async_send_recv_create(fluxcpp_context_t ctx, int64_t max_m, int64_t n,
                                                fluxcpp_dtype_t dtype, int num_slots, int num_peers,
                                                const int* peers, fluxcpp_async_send_recv_t* op) {
  fluxcpp::AsyncSendRecvOptions o{max_m, n, to_dtype(dtype), num_slots, std::nullopt};
  // A rank-local problem with the list still takes part in the collective create.
  std::string local;
  if (peers != nullptr && num_peers >= 0) {
    o.peers = std::vector<int>(peers, peers + num_peers);
  } else if (num_peers < 0) {
    local = "num_peers=" + std::to_string(num_peers) + " must be >= 0";
  } else if (num_peers > 0) {
    local = "peers is NULL with num_peers=" + std::to_string(num_peers);
  }
  return create_op(__func__, ctx, o, op, local);
}

fluxcpp_status_t fluxcpp_async_send_recv_send(fluxcpp_async_send_recv_t op, int dst,
                                              const void* data, int64_t m, uint64_t* seq) {
  return send_message(__func__, op, dst, data, m, seq, false);
}

fluxcpp_status_t fluxcpp_async_send_recv_isend(fluxcpp_async_send_recv_t op, int dst,
                                               const void* data, int64_t m, uint64_t* seq) {
  return send_message(__func__, op, dst, data, m, seq, true);
}

fluxcpp_status_t fluxcpp_async_send_recv_send_wait(fluxcpp_async_send_recv_t op, int dst,
                                                   uint64_t seq) {
  return call_op(__func__, op, [&](auto& impl) { impl.send_wait(dst, seq); });
}

fluxcpp_status_t fluxcpp_async_send_recv_send_test(fluxcpp_async_send_recv_t op, int dst,
                                                   uint64_t seq, int* done) {
  return call_op_out(__func__, op, "done", done, 0,
                     [&](auto& impl) { return impl.send_test(dst, seq) ? 1 : 0; });
}

fluxcpp_status_t fluxcpp_async_send_recv_send_ready(fluxcpp_async_send_recv_t op, int dst,
                                                    int* ready) {
  return call_op_out(__func__, op, "ready", ready, 0,
                     [&](auto& impl) { return impl.send_ready(dst) ? 1 : 0; });
}

fluxcpp_status_t fluxcpp_async_send_recv_recv(fluxcpp_async_send_recv_t op, int src, void* out,
                                              int64_t out_rows, int64_t* m) {
  return call_op(__func__, op, [&](auto& impl) {
    const int64_t rows = impl.recv(src, out, out_rows);
    if (m != nullptr) *m = rows;
  });
}

fluxcpp_status_t fluxcpp_async_send_recv_probe(fluxcpp_async_send_recv_t op, int src, int64_t* m) {
  return call_op_out(__func__, op, "m", m, -1, [&](auto& impl) { return impl.probe(src); });
}

fluxcpp_status_t fluxcpp_async_send_recv_destroy(fluxcpp_async_send_recv_t op) {
  if (op == nullptr) return FLUXCPP_SUCCESS;
  std::unique_ptr<fluxcpp_async_send_recv_s> holder(op);  // freed whatever happens
  return guarded([&] { holder->impl->close(); });
}

}  // extern "C"
