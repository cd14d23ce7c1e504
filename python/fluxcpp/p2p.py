"""AsyncSendRecv (FLUX AsyncSendRecv): point-to-point messages for pipeline parallelism."""
import ctypes

import torch

from . import _lib
from ._base import Op
from ._checks import INT32_MAX, UINT64_MAX, c_dtype, int_list, size, tensor
from ._lib import checked


class AsyncSendRecv(Op):
    """fluxcpp_async_send_recv. A message is m rows (0 <= m <= max_m) of n elements.

    peers: the ranks this rank exchanges with (None: the ring neighbours); num_slots messages
    in flight per ordered pair. send(dst, data) / isend(dst, data) -> seq, send_wait(dst, seq),
    send_test(dst, seq) -> bool, recv(src, out=None) -> [m, n] tensor (a view of out's first m
    rows when given), probe(src) -> m or -1. Only create and close are collective; errors of
    the other calls are point-to-point."""
    _c = "async_send_recv"
    _collective = False

    def __init__(self, ctx, max_m, n, dtype, num_slots=2, peers=None):
        where = "AsyncSendRecv"
        self.max_m, self.n, self.dtype = size(where, "max_m", max_m), size(where, "n", n, 1), dtype
        self.num_slots = size(where, "num_slots", num_slots, 1, INT32_MAX)
        self.peers = None if peers is None else int_list(
            where, "peers", peers, "None or a sequence of ranks", 0, INT32_MAX)
        arr = None if self.peers is None else (ctypes.c_int * max(len(self.peers), 1))(
            *self.peers)
        self._create(ctx, self.max_m, self.n, c_dtype("AsyncSendRecv", "dtype", dtype),
                     self.num_slots, 0 if self.peers is None else len(self.peers), arr)
        self._send = _lib.fn("fluxcpp_async_send_recv_send")
        self._isend = _lib.fn("fluxcpp_async_send_recv_isend")
        self._wait = _lib.fn("fluxcpp_async_send_recv_send_wait")
        self._test = _lib.fn("fluxcpp_async_send_recv_send_test")
        self._recv = _lib.fn("fluxcpp_async_send_recv_recv")
        self._probe = _lib.fn("fluxcpp_async_send_recv_probe")
        self._in_flight = {}  # (dst, seq) -> data of an isend, kept alive until it completes

    @staticmethod
    def _peer(where, name, value):
        return size(f"AsyncSendRecv.{where}", name, value, 0, INT32_MAX)

    @staticmethod
    def _seq(where, value):
        return size(f"AsyncSendRecv.{where}", "seq", value, 0, UINT64_MAX)

    def _data(self, where, data):
        p = tensor(where, "data", data, self.dtype, (None, self.n))
        return p, data.shape[0]

    def _post(self, where, post, dst, data):
        """send and isend: (dst, seq)."""
        h = self._handle or self._h()
        dst = self._peer(where, "dst", dst)
        p, m = self._data(f"AsyncSendRecv.{where}", data)
        seq = ctypes.c_uint64()
        s = post(h, dst, p, m, ctypes.byref(seq))
        return dst, checked(s, seq.value)

    def send(self, dst, data):
        """Blocks until the slot is free, copies, publishes; data reusable on return."""
        return self._post("send", self._send, dst, data)[1]

    def isend(self, dst, data):
        """Blocks only until the slot is free; data must stay untouched until send_wait or
        send_test says done (this object keeps a reference until then)."""
        dst, seq = self._post("isend", self._isend, dst, data)
        self._in_flight[(dst, seq)] = data
        return seq

    def send_wait(self, dst, seq):
        dst, seq = self._peer("send_wait", "dst", dst), self._seq("send_wait", seq)
        checked(self._wait(self._h(), dst, seq))
        self._in_flight.pop((dst, seq), None)

    def send_test(self, dst, seq):
        dst, seq = self._peer("send_test", "dst", dst), self._seq("send_test", seq)
        done = ctypes.c_int(0)
        checked(self._test(self._h(), dst, seq, ctypes.byref(done)))
        if done.value:
            self._in_flight.pop((dst, seq), None)
        return bool(done.value)

    def recv(self, src, out=None):
        """Blocks until the next message from src; returns its [m, n] rows."""
        h = self._handle or self._h()
        src = self._peer("recv", "src", src)
        if out is None:
            out = torch.empty((self.max_m, self.n), dtype=self.dtype)
            p = out.data_ptr()
        else:
            p = tensor("AsyncSendRecv.recv", "out", out, self.dtype, (None, self.n))
        m = ctypes.c_int64(-1)
        checked(self._recv(h, src, p, out.shape[0], ctypes.byref(m)))
        return out[:m.value]

    def probe(self, src):
        src = self._peer("probe", "src", src)
        m = ctypes.c_int64(-1)
        return checked(self._probe(self._h(), src, ctypes.byref(m)), m.value)
