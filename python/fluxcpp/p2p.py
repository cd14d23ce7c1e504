"""AsyncSendRecv (FLUX AsyncSendRecv): point-to-point messages for pipeline parallelism."""
import ctypes

import torch

from . import _lib
from ._base import Op
from ._checks import c_dtype, tensor

_raise = _lib.raise_status


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
        self.max_m, self.n, self.dtype, self.num_slots = int(max_m), int(n), dtype, int(num_slots)
        self.peers = None if peers is None else [int(p) for p in peers]
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

    def _data(self, where, data):
        p = tensor(where, "data", data, self.dtype, (None, self.n))
        return p, data.shape[0]

    def send(self, dst, data):
        """Blocks until the slot is free, copies, publishes; data reusable on return."""
        h = self._handle or self._h()
        p, m = self._data("AsyncSendRecv.send", data)
        seq = ctypes.c_uint64()
        s = self._send(h, int(dst), p, m, ctypes.byref(seq))
        if s:
            _raise(s)
        return seq.value

    def isend(self, dst, data):
        """Blocks only until the slot is free; data must stay untouched until send_wait or
        send_test says done (this object keeps a reference until then)."""
        h = self._handle or self._h()
        p, m = self._data("AsyncSendRecv.isend", data)
        seq = ctypes.c_uint64()
        s = self._isend(h, int(dst), p, m, ctypes.byref(seq))
        if s:
            _raise(s)
        self._in_flight[(int(dst), seq.value)] = data
        return seq.value

    def send_wait(self, dst, seq):
        s = self._wait(self._h(), int(dst), int(seq))
        if s:
            _raise(s)
        self._in_flight.pop((int(dst), int(seq)), None)

    def send_test(self, dst, seq):
        done = ctypes.c_int(0)
        s = self._test(self._h(), int(dst), int(seq), ctypes.byref(done))
        if s:
            _raise(s)
        if done.value:
            self._in_flight.pop((int(dst), int(seq)), None)
        return bool(done.value)

    def recv(self, src, out=None):
        """Blocks until the next message from src; returns its [m, n] rows."""
        h = self._handle or self._h()
        if out is None:
            out = torch.empty((self.max_m, self.n), dtype=self.dtype)
            p = out.data_ptr()
        else:
            p = tensor("AsyncSendRecv.recv", "out", out, self.dtype, (None, self.n))
        m = ctypes.c_int64(-1)
        s = self._recv(h, int(src), p, out.shape[0], ctypes.byref(m))
        if s:
            _raise(s)
        return out[:m.value]

    def probe(self, src):
        m = ctypes.c_int64(-1)
        s = self._probe(self._h(), int(src), ctypes.byref(m))
        if s:
            _raise(s)
        return m.value
