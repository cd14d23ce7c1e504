"""fluxcpp's torch.distributed backend, "fluxcpp" (docs/torch_backend.md).

`import fluxcpp` registers it, for the CPU device, when the package was built with it
(fluxcpp/_c10d.so, made for the torch 2.x of scripts/python); then `torch.distributed.init_process_group("fluxcpp")` runs every
torch.distributed call on fluxcpp, and `fluxcpp.Context.from_group(group)` hands the group's
context to the fused ops."""
import torch
import torch.distributed as dist

from ._lib import Error, Status, Unavailable

try:
    from . import _c10d
    _WHY = ""
except ImportError as e:  # built without torch 2.x
    _c10d = None
    _WHY = str(e)

NAME = "fluxcpp"


def available():
    """Whether this build has the backend."""
    return _c10d is not None and dist.is_available()


def _unavailable(store, rank, size, timeout):
    raise RuntimeError(f"fluxcpp: this build has no torch.distributed backend ({_WHY}); "
                       "build fluxcpp after scripts/install_deps.sh --python, which installs "
                       "torch 2.x into the environment scripts/python runs, and run that Python")


def register():
    """Registers the backend with torch.distributed (done by `import fluxcpp`); idempotent.
    Returns whether the backend is usable. Without it, "fluxcpp" is still registered, with a
    creator that says why init_process_group("fluxcpp") cannot work."""
    if not dist.is_available():
        return False
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _c10d.create_backend if available()
                                      else _unavailable, devices=["cpu"])
    return available()


def shared_context_handle(group):
    """A second C handle on `group`'s context (None: the default group), for Context.from_group."""
    if _c10d is None:
        raise Unavailable(f"fluxcpp.Context.from_group: this build has no torch.distributed "
                          f"backend ({_WHY}); build it after scripts/install_deps.sh --python")
    if not dist.is_initialized():
        raise Error(Status.INVALID_USAGE, "fluxcpp.Context.from_group: torch.distributed is not "
                    "initialised (init_process_group(\"fluxcpp\") first)")
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    if group is dist.GroupMember.NON_GROUP_MEMBER:
        raise Error(Status.INVALID_ARGUMENT, "fluxcpp.Context.from_group: this rank is not a "
                    "member of the group")
    try:
        backend = group._get_backend(torch.device("cpu"))
    except RuntimeError as e:
        raise Error(Status.INVALID_ARGUMENT, "fluxcpp.Context.from_group: the group has no CPU "
                    f"backend ({e})") from None
    return _c10d.share_context(backend)
