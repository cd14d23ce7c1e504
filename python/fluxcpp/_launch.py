"""The launcher's store, rank and world size, for Context.from_store() called without a store.

In order: torch.distributed's default group when it is initialised (its store, rank and size);
else the environment a launcher sets (torchrun, or a job that sets it as torch's env://
rendezvous reads it): MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE. The store is then a TCPStore
at MASTER_ADDR:MASTER_PORT made the way torch's env:// rendezvous makes it, so a later
init_process_group in the same process works beside it: under torchrun every worker is a client
of the agent's store (TORCHELASTIC_USE_AGENT_STORE), otherwise rank 0 hosts it (multi-tenant,
shared with torch's own)."""
import datetime
import os

_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def _env_int(where, name):
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{where}: the environment variable {name}={value!r} is not an "
                         "integer") from None


def launcher_store(where, rank, world_size, timeout_s):
    """(store, rank, world_size) of the launcher, always the default group's whole world (a
    subgroup's context: pass a PrefixStore of your own with the group's rank and size); rank /
    world_size, when not None, must agree with it. A ValueError naming what is missing when there is no launcher."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        found = (dist.get_rank(), dist.get_world_size(), "torch.distributed's default group")
        _agree(where, rank, world_size, found)
        store = dist.distributed_c10d._get_default_store()
        if store is None:  # the MPI backend meets without a store
            raise ValueError(f"{where}: torch.distributed's default group ({dist.get_backend()})"
                             " has no store: under mpirun use fluxcpp.Context(), else pass a "
                             "store, rank and world_size")
        return store, found[0], found[1]
    missing = [v for v in _ENV if not os.environ.get(v)]
    if missing:
        raise ValueError(
            f"{where}: no store given, torch.distributed is not initialised and "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set (torchrun "
            "sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE): pass a store, rank and "
            "world_size, e.g. Context.from_store(dist.FileStore(path, world), rank, world), "
            "or start the ranks with torchrun")
    addr, port = os.environ["MASTER_ADDR"], _env_int(where, "MASTER_PORT")
    found = (_env_int(where, "RANK"), _env_int(where, "WORLD_SIZE"),
             "RANK / WORLD_SIZE in the environment")
    _agree(where, rank, world_size, found)
    env_rank, env_world = found[0], found[1]
    timeout = datetime.timedelta(seconds=timeout_s)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"/worker/attempt_{attempt}",
                                 dist.TCPStore(addr, port, env_world, False, timeout))
    else:
        store = dist.TCPStore(addr, port, env_world, env_rank == 0, timeout, multi_tenant=True)
    return store, env_rank, env_world


def _agree(where, rank, world_size, found):
    for name, given, value in (("rank", rank, found[0]), ("world_size", world_size, found[1])):
        if given is not None and given != value:
            raise ValueError(f"{where}: {name}={given} but {found[2]} says {value} (leave "
                             f"{name} out to take the launcher's)")
