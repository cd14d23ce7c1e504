"""Runs a test script on N ranks started as torchrun or a serving stack starts them: Python
multiprocessing (spawn), RANK / WORLD_SIZE / LOCAL_RANK in the environment, a FileStore to meet
through, and no MPI anywhere (support.py then creates contexts with Context.from_store).

    spawn.py -np N [--hosts H] [--timeout S] script.py [args...]

--hosts H simulates H hosts of N / H consecutive ranks on this machine: FLUXCPP_HOST_ID tells
them apart, so the ranks of different hosts meet over the library's TCP channel (on the
loopback unless FLUXCPP_SOCKET_IFNAME is set), exactly as on separate machines.

Exit status: 0 when every rank exits 0; 1 otherwise, or when the watchdog (--timeout, default
240 s) kills a hung run. Every rank's output goes to this process's stdout/stderr."""
import argparse
import multiprocessing as mp
import os
import runpy
import shutil
import sys
import tempfile


def _rank_main(rank, world, hosts, store, script, args):
    per_host = world // hosts
    os.environ.update(FLUXCPP_TEST_LAUNCH="store", FLUXCPP_TEST_STORE=store, RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_host),
                      LOCAL_WORLD_SIZE=str(per_host))
    if hosts > 1:
        os.environ["FLUXCPP_HOST_ID"] = f"simulated-host-{rank // per_host}"
        os.environ.setdefault("FLUXCPP_SOCKET_IFNAME", "lo")
    sys.argv = [script] + args
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-np", type=int, required=True, help="number of ranks")
    ap.add_argument("--hosts", type=int, default=1, help="simulated hosts (divides -np)")
    ap.add_argument("--timeout", type=float, default=240.0, help="watchdog, seconds")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.hosts < 1 or a.np % a.hosts != 0:
        ap.error(f"--hosts {a.hosts} must divide -np {a.np}")
    tmp = tempfile.mkdtemp(prefix="fluxcpp_spawn_")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank_main, args=(r, a.np, a.hosts, os.path.join(tmp, "store"), a.script,
                                                  a.args)) for r in range(a.np)]
    for p in procs:
        p.start()
    status = 0
    try:
        import time
        deadline = time.monotonic() + a.timeout
        for r, p in enumerate(procs):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                print(f"spawn.py: rank {r} still running after {a.timeout} s: killing every rank",
                      file=sys.stderr, flush=True)
                status = 1
                break
            if p.exitcode != 0:
                print(f"spawn.py: rank {r} exited with {p.exitcode}", file=sys.stderr, flush=True)
                status = 1
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status)


if __name__ == "__main__":
    main()
