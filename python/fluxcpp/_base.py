"""fluxcpp.Context and the base of every op class (create, close, with, __del__)."""
import ctypes
import hashlib
import numbers
import types
import warnings

from . import _lib
from ._checks import INT32_MAX, c_dtype, is_bool, size
from ._lib import Error, Status, c_void_p
from ._launch import launcher_store
from ._store import (Claim, StoreBridge, effective_timeout, get_within, job_tag, library_prefix,
                     meeting_key, store_wait)


def _comm_handle(comm):
    """(ctypes type, value) of the MPI_Comm behind an mpi4py communicator.

    MPI._handleof gives the handle itself (a pointer for Open MPI, an int for MPICH);
    MPI._addressof would give the address of the Python object's copy of it."""
    from mpi4py import MPI
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"Context: comm must be an mpi4py communicator or None, got "
                        f"{type(comm).__name__}")
    ctype = c_void_p if MPI._sizeof(MPI.Comm) == ctypes.sizeof(c_void_p) else ctypes.c_int
    return ctype, MPI._handleof(comm)


class _Handle:
    """A C handle (self._handle, None once closed) that close() destroys through
    self._destroy(handle) -> status. Never destroyed by __del__: an open handle is leaked."""

    @property
    def closed(self):
        return getattr(self, "_handle", None) is None

    def close(self):
        """fluxcpp_context_destroy / fluxcpp_<op>_destroy (collective where the C destroy is).
        Closing twice is a no-op."""
        h, self._handle = getattr(self, "_handle", None), None
        if h is not None:
            _lib.checked(self._destroy(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Never communicates: destroy is collective.
        if getattr(self, "_handle", None) is not None:
            warnings.warn(f"fluxcpp.{type(self).__name__} was not closed; its resources are "
                          "leaked (close() is collective, so it is not called from __del__)",
                          ResourceWarning, stacklevel=2)


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Context(_Handle):
    """fluxcpp_context_t over an mpi4py communicator (None: MPI_COMM_WORLD), or without MPI
    through Context.from_store. Collective.

    ranks_per_host: 0 detects hosts, > 0 makes groups of that many consecutive ranks act as one
    host; ranks_per_node is its former name (still accepted, with a DeprecationWarning).
    Attributes rank, world_size, host_rank, host_size (node_rank, node_size: their former names).
    close() (collective) or `with`."""

    def __init__(self, comm=None, *, ranks_per_host=0, timeout_s=0.0, compute_threads=0,
                 comm_threads=0, ranks_per_node=None):
        self._handle = None
        if ranks_per_node is not None:
            warnings.warn("fluxcpp.Context: ranks_per_node is the former name of ranks_per_host",
                          DeprecationWarning, stacklevel=2)
            ranks_per_node = size("Context", "ranks_per_node", ranks_per_node, 0, INT32_MAX)
            if ranks_per_host not in (0, ranks_per_node):
                raise ValueError(f"Context: ranks_per_host={ranks_per_host} and ranks_per_node="
                                 f"{ranks_per_node} (its former name) differ; pass one")
            ranks_per_host = ranks_per_node
        cfg = self._config("Context", ranks_per_host, timeout_s, compute_threads, comm_threads)
        if comm is None:
            from mpi4py import MPI  # initialises MPI (thread level MULTIPLE by default)
            comm = MPI.COMM_WORLD
        ctype, value = _comm_handle(comm)
        self._comm = comm  # keeps the communicator alive as long as the context
        create = _lib.fn("fluxcpp_context_create", [ctype, c_void_p, c_void_p])
        out = c_void_p()
        _lib.checked(create(value, ctypes.byref(cfg), ctypes.byref(out)))
        self._adopt(out.value)

    @classmethod
    def from_store(cls, store=None, rank=None, world_size=None, *, timeout_s=0.0,
                   compute_threads=0, comm_threads=0, key=None, ranks_per_host=0):
        """A context without MPI for ranks on one host or several (as torchrun, multiprocessing
        or a serving stack starts them): rank 0 sets a fresh id in `store` (a torch.distributed
        Store: TCPStore, FileStore, ...) under `key`, the others wait for it there, and every
        rank creates the context through the store under a prefix that id makes the call's own
        (fluxcpp_context_create_from_store): the ranks of a host meet in shared memory, hosts
        over gloo's TCP transport (FLUXCPP_SOCKET_IFNAME or GLOO_SOCKET_IFNAME picks the
        interface). Collective over the world_size ranks.

        store None: the launcher's (fluxcpp._launch): torch.distributed's default group when it
        is initialised, else the TCPStore at MASTER_ADDR:MASTER_PORT with RANK and WORLD_SIZE
        (what torchrun sets), made as torch's env:// rendezvous makes it; rank and world_size
        may then be left out (given, they must agree with the launcher's).

        key None: one key per job and call to from_store without a key in this process (calls
        with a key, and Context.local, are not counted; the job: the parent
        process, and torchrun's restart count; the call counted even when it fails, so the ranks
        stay paired), the same on every rank as long as the ranks make the same calls in the
        same order. Ranks of one job started by different parent processes, and groups of ranks
        that share one store, pass keys of their own (or a PrefixStore). Each rank claims its
        rank under the key with the store's atomic add: a rank claimed twice, or a key claimed
        twice and read afterwards, is INVALID_USAGE naming the key (an explicit key must be the
        job's own: ranks of two jobs that claim it before they collide cannot be told apart).

        The wait for the id is bounded by timeout_s (0: the store's own timeout, else
        FLUXCPP_TIMEOUT_S or 60 s), every other store call and the create by timeout_s (0:
        FLUXCPP_TIMEOUT_S or 60 s), whatever the store offers. Rank 0 removes the id and the
        claims once every rank has read it; a failed call gives its claim back, so a retry under
        the same key works.

        ranks_per_host 0: hosts are machines; n > 0: ranks 0..n-1, n..2n-1, ... of one machine act
        as hosts of their own (the multi-host paths on one machine); the same on every rank, and a
        group must share a machine, else INVALID_ARGUMENT on every rank."""
        where = "Context.from_store"
        hint = ""
        if key is None:
            Context._from_store_count += 1  # first: a call that fails below still takes its key
            key = meeting_key(job_tag(), Context._from_store_count)
            hint = (f" (the default key names the job by its parent process, {job_tag()}: "
                    "ranks of one job started by different parents pass a key of their own)")
        cfg = cls._config(where, ranks_per_host, timeout_s, compute_threads,
                          comm_threads)  # checks first
        if world_size is not None:
            world_size = size(where, "world_size", world_size, 1, INT32_MAX)
        if rank is not None:
            rank = size(where, "rank", rank, 0, INT32_MAX)
        if store is None:
            # The launcher's store is shared with torch (the default group's, torchrun's): its
            # own timeout (30 min for a process group) does not bound this call, timeout_s does.
            timeout_s = effective_timeout(float(timeout_s))
            store, rank, world_size = launcher_store(where, rank, world_size, timeout_s)
        elif rank is None or world_size is None:
            raise TypeError(f"{where}: a store needs rank and world_size (leave all three out "
                            "under torchrun to take the launcher's)")
        if rank >= world_size:
            raise ValueError(f"{where}: rank={rank} must be < world_size={world_size}")
        for method in ("set", "get", "add"):
            if not callable(getattr(store, method, None)):
                raise TypeError(f"{where}: store must be a torch.distributed Store (set/get/add), "
                                f"got {type(store).__name__}")
        self = cls.__new__(cls)
        self._handle = None
        self._comm = None
        uid = _UniqueId()
        wait_s = effective_timeout(float(timeout_s))
        claim = Claim(store, key, rank, world_size, wait_s, where)
        try:
            if rank == 0:
                _lib.checked(_lib.fn("fluxcpp_get_unique_id")(ctypes.byref(uid)))
                claim.set_id(bytes(uid))  # all 128 bytes (.internal stops at a NUL)
            else:
                try:
                    raw = get_within(store, key, store_wait(store, float(timeout_s)),
                                     f"waiting for key {key!r}")
                except RuntimeError as e:  # the store's timeout (or a lost connection)
                    raise Error(Status.TIMEOUT, f"{where}: rank 0 did not set the id under key "
                                f"{key!r} in the store (this is rank {rank}){hint}: "
                                f"{getattr(e, 'message', e)}") from e
                claim.check_writer()
                ctypes.memmove(ctypes.addressof(uid), raw, min(len(raw), ctypes.sizeof(uid)))
            # The ranks meet under a prefix the id makes this attempt's own: on one host in
            # shared memory, across hosts over the library's TCP channel.
            attempt = hashlib.sha1(bytes(uid)).hexdigest()[:16]
            bridge = StoreBridge(store, library_prefix(key, attempt))
            out = c_void_p()
            create = _lib.fn("fluxcpp_context_create_from_store")
            try:
                _lib.checked(create(ctypes.byref(bridge.struct), world_size, rank,
                                    ctypes.byref(cfg), ctypes.byref(out)))
            except Error as e:
                if bridge.error is not None:
                    raise Error(e.status, f"{getattr(e, 'message', e)} (the store raised: "
                                f"{bridge.error})") from e
                raise
        except BaseException:
            claim.release()
            raise
        self._adopt(out.value)
        self._store = store  # a TCPStore made here (rank 0 may host it) lives as the context
        claim.done()  # rank 0: every rank has read the id and claimed (they all met)
        return self

    @classmethod
    def local(cls, *, timeout_s=0.0, compute_threads=0, comm_threads=0):
        """A context of one rank, this process alone, under any launcher (mpirun, torchrun,
        multiprocessing, none): no MPI and no store outside the process. Its ops are the GEMM
        engine's local calls (an AgGemm of one rank is one GEMM, on packed weights too): e.g. a
        ColumnParallelLinear's local_ctx. compute_threads 0: FLUXCPP_COMPUTE_THREADS, else every
        core this process may run on (its CPU affinity; the context knows no other rank): pass
        the cores the rank owns when several ranks share the host, and torch's thread count to
        compare with torch.mm."""
        import torch.distributed as dist
        return cls.from_store(dist.HashStore(), 0, 1, timeout_s=timeout_s,
                              compute_threads=compute_threads, comm_threads=comm_threads,
                              key="fluxcpp/local")

    _from_store_count = 0

    @classmethod
    def from_group(cls, group=None):
        """The context of a torch.distributed group of the "fluxcpp" backend (None: the default
        group): the one the backend built, so plain dist.* calls and fluxcpp's fused ops share
        one rendezvous and one set of buffers. Not collective. The context is used by one thread
        at a time: wait for the group's async works before calling an op made on it (a call that
        overlaps one fails with INVALID_USAGE, never corrupts). close() (or dropping it) only
        releases this handle; the group owns the context."""
        from .distributed import shared_context_handle
        ctx = cls.__new__(cls)
        ctx._handle, ctx._comm, ctx._shared = None, None, True
        ctx._adopt(shared_context_handle(group))
        return ctx

    def __del__(self):
        if getattr(self, "_shared", False):  # a lent handle: releasing it never communicates
            self.close()
            return
        super().__del__()

    @staticmethod
    def _config(where, ranks_per_host, timeout_s, compute_threads, comm_threads):
        ranks_per_host = size(where, "ranks_per_host", ranks_per_host, 0, INT32_MAX)
        compute_threads = size(where, "compute_threads", compute_threads, 0, INT32_MAX)
        comm_threads = size(where, "comm_threads", comm_threads, 0, INT32_MAX)
        if is_bool(timeout_s) or not isinstance(timeout_s, numbers.Real):
            raise TypeError(f"{where}: timeout_s must be a number of seconds, got "
                            f"{type(timeout_s).__name__} {timeout_s!r}")
        return _lib._ConfigStruct(ctypes.sizeof(_lib._ConfigStruct), 0, float(timeout_s),
                                  compute_threads, comm_threads, ranks_per_host)

    def _adopt(self, handle):
        self._handle = handle
        vals = [ctypes.c_int() for _ in range(4)]
        info = _lib.fn("fluxcpp_context_info")
        _lib.checked(info(self._handle, *[ctypes.byref(v) for v in vals]))
        self.rank, self.world_size, self.host_rank, self.host_size = (v.value for v in vals)

    # The former names of host_rank and host_size.
    node_rank = property(lambda self: self.host_rank)
    node_size = property(lambda self: self.host_size)

    @property
    def comm(self):
        return self._comm

    def _require(self, where):
        if self._handle is None:
            raise Error(Status.INVALID_USAGE, f"{where}: the context is closed")
        return self._handle

    @staticmethod
    def _destroy(h):
        return _lib.fn("fluxcpp_context_destroy")(h)

    def __repr__(self):
        state = "closed" if self._handle is None else (
            f"rank={self.rank}, world_size={self.world_size}, host_rank={self.host_rank}, "
            f"host_size={self.host_size}")
        return f"fluxcpp.Context({state})"


class Op(_Handle):
    """Base of the op classes: a C handle created in __init__, destroyed by close()."""
    _c = ""            # the C op name: fluxcpp_<_c>_create / _forward / _destroy
    _collective = True  # a forward failing a Python check poisons the C call (see _poison)

    def _create(self, ctx, *args):
        self._handle = None
        if not isinstance(ctx, Context):
            raise TypeError(f"{type(self).__name__}: ctx must be a fluxcpp.Context, got "
                            f"{type(ctx).__name__}")
        self._ctx = ctx
        self._W = ctx.world_size
        self._rank = ctx.rank
        h = ctx._require(type(self).__name__)
        create = _lib.fn(f"fluxcpp_{self._c}_create")
        self._destroy_fn = _lib.fn(f"fluxcpp_{self._c}_destroy")
        out = c_void_p()
        _lib.checked(create(h, *args, ctypes.byref(out)))
        self._handle = out.value

    def _setup(self, ctx, sizes, dtypes):
        """The create of most ops: sizes, (attribute, value, minimum), checked by size() in order,
        then dtypes, (attribute, torch dtype), by c_dtype(); set as attributes of those names and
        passed to fluxcpp_<_c>_create in that order. Binds fluxcpp_<_c>_forward as self._fwd."""
        name = type(self).__name__
        args = []
        for attr, value, minimum in sizes:
            args.append(size(name, attr, value, minimum))
            setattr(self, attr, args[-1])
        for attr, dtype in dtypes:
            args.append(c_dtype(name, attr, dtype))
            setattr(self, attr, dtype)
        self._fw = f"{name}.forward"
        self._create(ctx, *args)
        self._fwd = _lib.fn(f"fluxcpp_{self._c}_forward")

    def _h(self):
        h = self._handle
        if h is None:
            raise Error(Status.INVALID_USAGE, f"{type(self).__name__}: the op is closed")
        return h

    def _poison(self):
        """After a Python-side check failed on this rank, a collective op still enters its C
        forward, with an invalid shape and no data, so the other ranks get INVALID_ARGUMENT at
        once instead of waiting for a peer that never comes (a TIMEOUT breaking the op)."""

    def _refuse(self, exc):
        """_poison() with exc's message as this rank's reason (fluxcpp_refuse_next_call): the
        peers read "<op>: rank r refused its own arguments of this call: <what exc says>", never
        the placeholder shape _poison passes."""
        why = str(exc) if isinstance(exc, (TypeError, ValueError)) else \
            f"{type(exc).__name__}: {exc}"
        refuse = _lib.fn("fluxcpp_refuse_next_call")
        refuse(why.encode("utf-8", "replace"))
        try:
            self._poison()
        finally:
            refuse(None)  # _poison's C call consumed it, unless it never got there

    def __init_subclass__(cls, **kw):
        # op(...) is forward(...) itself, not a wrapper re-packing *args/**kwargs (which costs
        # microseconds per call).
        super().__init_subclass__(**kw)
        if "forward" in cls.__dict__:
            cls.__call__ = cls.__dict__["forward"]
        # A public op whose __init__ is a private base's: its own copy, so that Python's
        # TypeErrors about the arguments (a missing one) name the op, not the base.
        init = cls.__init__
        if (not cls.__name__.startswith("_") and "__init__" not in cls.__dict__
                and init.__qualname__.startswith("_")):
            qualname = f"{cls.__name__}.__init__"
            try:  # Python 3.11 names the code's qualname in the message, earlier the function's
                code = init.__code__.replace(co_qualname=qualname)
            except TypeError:
                code = init.__code__
            own = types.FunctionType(code, init.__globals__, "__init__", init.__defaults__,
                                     init.__closure__)
            own.__kwdefaults__, own.__doc__ = init.__kwdefaults__, init.__doc__
            own.__qualname__ = qualname
            cls.__init__ = own

    def _destroy(self, h):
        return self._destroy_fn(h)


class ZeroCopyInput:
    """Mixin: input_buffer() for ops with zero-copy input."""

    def _buffer_shape(self):
        raise NotImplementedError

    def input_buffer(self):
        """This rank's slot of the op's symmetric buffer as a tensor ([max rows on this rank,
        k] in the input dtype; AllReduce: [max_count]), after every peer finished reading it for
        the previous forward.
        Write this call's input into it (or a leading slice) and pass that as `input`: forward
        then skips copying it. Call again before each write. Valid until close()."""
        import torch
        p = c_void_p()
        _lib.checked(_lib.fn(f"fluxcpp_{self._c}_input_buffer")(self._h(), ctypes.byref(p)))
        buf = getattr(self, "_buffer", None)
        if buf is None or buf.data_ptr() != p.value:
            shape = self._buffer_shape()
            count = 1
            for d in shape:
                count *= d
            nbytes = count * torch.empty(0, dtype=self._in_dtype).element_size()
            raw = (ctypes.c_char * max(nbytes, 1)).from_address(p.value)
            buf = torch.frombuffer(raw, dtype=self._in_dtype, count=count).view(shape)
            self._buffer = buf
        return buf
