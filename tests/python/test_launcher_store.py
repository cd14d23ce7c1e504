"""Context.from_store() with no store takes the launcher's: 2 ranks started by multiprocessing with
MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE as a launcher sets them (no torchrun agent: rank 0
hosts the TCPStore). Each rank: from_store() and an exact all_reduce; then init_process_group on
env:// beside it (the same port: the store is multi-tenant); then from_store() again, which takes
the default group's store, and an all_reduce on it; misuse: rank or world_size that disagree
with the launcher's, a store without rank, no launcher at all. The real torchrun path runs in
python.readme_torchrun. Watchdog: 120 s."""
import multiprocessing as mp
import os
import socket
import sys
import time

WORLD = 2


def rank_main(rank, port, errors):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(WORLD))
        for v in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID"):
            os.environ.pop(v, None)
        import torch
        import torch.distributed as dist
        import fluxcpp

        def all_reduce(ctx, what):
            x = torch.full((1000,), float(rank + 1))
            with fluxcpp.AllReduce(ctx, 1000) as op:
                y = op(x)
            want = float(WORLD * (WORLD + 1) // 2)
            if not torch.equal(y, torch.full((1000,), want)):
                raise AssertionError(f"{what}: all_reduce gave {y[0].item()}, want {want}")

        def raises(exc, fn, what, *needles):
            try:
                fn()
            except exc as e:
                missing = [n for n in needles if n not in str(e)]
                if missing:
                    raise AssertionError(f"{what}: {missing} not in {e}") from e
                return
            raise AssertionError(f"{what}: no {exc.__name__}")

        raises(ValueError, lambda: fluxcpp.Context.from_store(rank=rank + 1), "rank disagrees",
               f"rank={rank + 1}", f"says {rank}")
        raises(ValueError, lambda: fluxcpp.Context.from_store(world_size=3), "world disagrees",
               "world_size=3", "says 2")
        raises(TypeError, lambda: fluxcpp.Context.from_store(dist.HashStore()),
               "store without rank", "rank and world_size")
        with fluxcpp.Context.from_store() as ctx:
            if (ctx.rank, ctx.world_size) != (rank, WORLD):
                raise AssertionError(f"context is rank {ctx.rank} of {ctx.world_size}")
            all_reduce(ctx, "from the environment")
        dist.init_process_group("gloo")  # env://, the port rank 0's store already serves
        with fluxcpp.Context.from_store() as ctx:  # now the default group's store
            all_reduce(ctx, "from the default group")
        dist.barrier()
        dist.destroy_process_group()
        for v in ("MASTER_ADDR", "MASTER_PORT"):
            del os.environ[v]
        raises(ValueError, fluxcpp.Context.from_store, "no launcher", "MASTER_ADDR",
               "MASTER_PORT", "torchrun")
    except BaseException as e:  # noqa: BLE001 - reported by the parent
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, port, errors)) for r in range(WORLD)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 120
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    failed = [p for p in procs if p.exitcode != 0]
    for p in procs:
        if p.is_alive():
            p.kill()
    while not errors.empty():
        print("FAIL:", errors.get())
    if failed:
        print(f"FAIL: {len(failed)} rank(s) failed or hung (watchdog 120 s)")
        sys.exit(1)
    print("python.launcher_store: OK")


if __name__ == "__main__":
    main()
