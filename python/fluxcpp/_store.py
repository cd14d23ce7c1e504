"""The store side of Context.from_store: one id per key and job, claimed, every wait bounded.

The default key names the job (job_tag: the parent process, and torchrun's restart count), so
two jobs sharing a store never meet under it.

Under `key` the store holds the id (set by rank 0) and one claim counter per rank
(`<key>/claim/<rank>`, raised with the store's atomic `add`). A rank that finds its counter
above 1 is not alone with that rank under that key: another job (or process) shares the store
and the key, and the rank fails saying so instead of joining somebody else's id. Rank 0 claims
before it sets the id, so a second writer never overwrites the first's; any rank that loses a
claim marks the key (`<key>/conflict`), and a rank that reads the id checks that exactly one
rank 0 claimed it and that the key is unmarked: the ranks that come after the collision fail
rather than join. (Ranks of two jobs that claim an explicit key before they collide cannot be
told apart: an explicit key must be the job's own.) A rank whose create fails gives its claim back
(rank 0 first removes its id), so a retry under the same key works; rank 0 removes the id and
every claim once the context exists (every rank has read and claimed by then).

The keys follow the one layout of docs/design.md "Store keys" (the torch backend's and the C
create's too): a meeting's root `fluxcpp/<job>/<generation>` (meeting_key; an explicit key takes
its place), its purposes under it (the id at the root itself, `claim/<rank>`, `conflict`), and
`ctx/<attempt>/` (library_prefix), the prefix under which the C create writes its own keys."""
import atexit
import datetime
import ctypes
import math
import os
import threading
import time

from ._lib import Error, Status


def job_tag():
    """What the ranks of one job share and another job's do not: under torchrun its run id
    (the same on every host of the job), else their parent process (the launcher: mpirun's
    daemon, multiprocessing's parent, the serving stack); and torchrun's restart count (a
    restart's workers get a key of their own, whatever the killed ones left in the store)."""
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    tag = f"run-{run}" if run else f"ppid-{os.getppid()}"
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    return f"{tag}-restart{restart}" if restart else tag


def store_wait(store, timeout_s):
    """How long a rank waits in the store for rank 0's id: timeout_s when given, else the store's
    own timeout (rank 0 may load a checkpoint first), else FLUXCPP_TIMEOUT_S or 60 s."""
    if timeout_s > 0:
        return float(timeout_s)
    own = getattr(store, "timeout", None)
    if isinstance(own, datetime.timedelta) and own.total_seconds() > 0:
        return own.total_seconds()
    return effective_timeout(0.0)


def effective_timeout(timeout_s):
    """timeout_s as the library reads it: 0 is FLUXCPP_TIMEOUT_S or its default (60 s)."""
    if timeout_s > 0:
        return float(timeout_s)
    try:
        t = float(os.environ.get("FLUXCPP_TIMEOUT_S", "60"))
    except ValueError:
        return 60.0  # the C create says what is wrong with it
    return t if t > 0 else 60.0


# Helper threads a timed-out wait left inside a C++ store's call (torch's FileStore, TCPStore).
# The interpreter must not end while one is there: the call returns into Python after
# finalization began and the process aborts ("terminate called without an active exception").
# At exit each gets a bounded wait for its call to end (the store's own timeout, set to the
# wait's, ends it): _EXIT_WAIT_S at most in all.
_left_in_store = []
_EXIT_WAIT_S = 10.0


def _join_left_in_store():
    until = time.monotonic() + _EXIT_WAIT_S
    for t in _left_in_store:
        t.join(max(0.0, until - time.monotonic()))


atexit.register(_join_left_in_store)


def call_within(fn, timeout_s, what, wait_at_exit=False):
    """fn() on a helper thread, waiting at most timeout_s (inf: forever). A store call that blocks
    past it (a store without set_timeout, a lost server) is left on its daemon thread; the
    caller gets TIMEOUT saying what it waited for. wait_at_exit: the call is a C++ store's,
    whose own timeout ends it: the interpreter's exit waits for it (above)."""
    if math.isinf(timeout_s):
        return fn()
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    t = threading.Thread(target=run, name="fluxcpp-store-wait", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        if wait_at_exit:
            _left_in_store.append(t)
        raise Error(Status.TIMEOUT, f"{what}: no answer from the store within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def get_within(store, key, timeout_s, what):
    """store.get(key), waiting at most timeout_s: through the store's own timeout when it has
    set_timeout (put back after), and on a helper thread bounded the same whatever it has.
    (Store.wait with a timeout can hang on a FileStore whose file does not exist yet in torch
    1.13, so it is not used.)"""
    def get():
        if not callable(getattr(store, "set_timeout", None)) or math.isinf(timeout_s):
            return store.get(key)
        saved = getattr(store, "timeout", None)
        store.set_timeout(datetime.timedelta(seconds=float(timeout_s)))
        try:
            return store.get(key)
        finally:
            if saved is not None:
                store.set_timeout(saved)
    # The thread's bound is a little longer: the store's own timeout, when it has one, is the
    # one that normally answers (its error names the key).
    return call_within(get, timeout_s + 1.0, what,
                       wait_at_exit=callable(getattr(store, "set_timeout", None)))


def meeting_key(job, generation):
    """The root of one meeting's keys: `fluxcpp/<job>/<generation>`."""
    return f"fluxcpp/{job}/{generation}"


def library_prefix(root, attempt):
    """The prefix the C create (fluxcpp_context_create_from_store) writes its keys under."""
    return f"{root}/ctx/{attempt}/"


def _claim_key(key, rank):
    return f"{key}/claim/{rank}"


class Claim:
    """This rank's claim on `key`: taken in __init__ (INVALID_USAGE when another process holds
    the same rank under the key), given back by release() when the create fails, removed with
    the id by rank 0's done()."""

    def __init__(self, store, key, rank, world_size, timeout_s, where):
        self.store, self.key, self.rank, self.world_size = store, key, rank, world_size
        self.timeout_s, self.where = timeout_s, where
        self.held = False
        n = self._add(_claim_key(key, rank), 1)
        if n != 1:
            # Mark the key first (the ranks that read it from now on fail too), then give the
            # claim back; the id is the other claimant's.
            self._quietly(lambda: self._add(f"{key}/conflict", 1))
            self._quietly(lambda: self._give_back(_claim_key(key, rank)))
            raise Error(Status.INVALID_USAGE,
                        f"{where}: rank {rank} is claimed {n} times under key {key!r} in this "
                        "store: another job (or process) uses the same store and key, or a job "
                        "that failed left its claim; pass a key of this job's own (or a fresh "
                        "store)")
        self.held = True

    def _add(self, k, v):
        return int(call_within(lambda: self.store.add(k, v), self.timeout_s,
                               f"{self.where}: store.add({k!r}) (this is rank {self.rank})"))

    def _give_back(self, k):
        # A counter rank 0 removed meanwhile comes back at -1: remove it again, never leave it
        # below zero (every later claim would then fail).
        if self._add(k, -1) <= 0 and callable(getattr(self.store, "delete_key", None)):
            self._delete(k)

    @staticmethod
    def _quietly(fn):
        try:
            fn()
        except Exception:  # cleanup after a failure: the failure being reported matters more
            pass

    def set_id(self, raw):
        """Rank 0: the id under the key (the claim made it this rank's alone)."""
        call_within(lambda: self.store.set(self.key, raw), self.timeout_s,
                    f"{self.where}: store.set({self.key!r}) (this is rank 0)")

    def check_writer(self):
        """A rank that read the id: exactly one rank 0 claimed the key and no rank was claimed
        twice so far, so the id is not another job's (nor one overwritten by another job's)."""
        zeros = self._add(_claim_key(self.key, 0), 0)
        conflicts = self._add(f"{self.key}/conflict", 0)
        if zeros != 1 or conflicts != 0:
            raise Error(Status.INVALID_USAGE,
                        f"{self.where}: key {self.key!r} in this store is used by more than one "
                        f"job ({zeros} claims of rank 0, {conflicts} of a rank claimed twice; "
                        f"this is rank {self.rank}); pass a key of this job's own (or a fresh "
                        "store)")

    def _delete(self, k):
        call_within(lambda: self.store.delete_key(k), self.timeout_s,
                    f"{self.where}: store.delete_key({k!r})")

    def release(self):
        """Give the claim back after a failure (best effort: the store may be gone). Rank 0
        first removes the id it set and the key's mark, so a retry's ranks never read the failed
        attempt's id and a retry under the key works."""
        if not self.held:
            return
        self.held = False
        if self.rank == 0 and callable(getattr(self.store, "delete_key", None)):
            self._quietly(lambda: self._delete(self.key))
            self._quietly(lambda: self._delete(f"{self.key}/conflict"))
        self._quietly(lambda: self._give_back(_claim_key(self.key, self.rank)))

    def done(self):
        """Rank 0, once the context exists: the id, the mark and every claim go (the key is
        then free for a later job). A store without delete_key keeps them: the next use of the
        key fails, saying so, rather than reading this id."""
        self.held = False
        if self.rank != 0 or not callable(getattr(self.store, "delete_key", None)):
            return
        for k in [self.key, f"{self.key}/conflict"] + [_claim_key(self.key, r)
                                                        for r in range(self.world_size)]:
            self._quietly(lambda k=k: self._delete(k))


class StoreBridge:
    """fluxcpp_store_t over a torch.distributed Store under `prefix`: the callbacks the C create
    calls on this thread. A callback's exception is kept (first one) for the caller's message;
    the create sees a failure code."""

    _SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                            ctypes.c_size_t)
    _WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double)
    _GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                            ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t))

    class Struct(ctypes.Structure):
        pass

    def __init__(self, store, prefix):
        self.store, self.prefix, self.error = store, prefix, None
        self._cb = (self._SET(self._set), self._WAIT(self._wait), self._GET(self._get))
        self.struct = StoreBridge.Struct(None, *self._cb)

    def _key(self, key):
        return self.prefix + key.decode()

    def _keep(self, e):
        if self.error is None:
            self.error = e

    def _set(self, _user, key, value, nbytes):
        try:
            self.store.set(self._key(key), ctypes.string_at(value, nbytes))
            return 0
        except Exception as e:  # handed to the caller through the create's failure
            self._keep(e)
            return 1

    def _wait(self, _user, key, timeout_s):
        # Store.wait with a timeout: the store's file exists by now (rank 0 set the id first),
        # so a FileStore's wait cannot hang on a missing file (torch 1.13).
        try:
            self.store.wait([self._key(key)],
                            datetime.timedelta(seconds=max(0.001, min(float(timeout_s), 1e8))))
            return 0
        except Exception as e:  # the store's timeout (1), or a lost store (-1: SYSTEM)
            if "imeout" in str(e) or "timed out" in str(e):
                return 1
            self._keep(e)
            return -1

    def _get(self, _user, key, value, capacity, nbytes):
        try:
            raw = self.store.get(self._key(key))
            nbytes[0] = len(raw)
            if len(raw) <= capacity:
                ctypes.memmove(value, raw, len(raw))
            return 0
        except Exception as e:
            self._keep(e)
            return 1


StoreBridge.Struct._fields_ = [("user", ctypes.c_void_p), ("set", StoreBridge._SET),
                               ("wait", StoreBridge._WAIT), ("get", StoreBridge._GET)]
