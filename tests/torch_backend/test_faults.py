"""A rank of a "fluxcpp" group killed (SIGKILL) or stopped (SIGSTOP) mid-collective: every other
rank's call fails with a RuntimeError naming that rank within the group's timeout (never a
hang), and the job leaves nothing in /dev/shm. Ranks are started by multiprocessing, or by
torchrun with --launcher torchrun.

    test_faults.py [--launcher mp|torchrun] [--fault kill|stop]"""
import argparse
import atexit
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from procs import free_port, kill_tree, tree  # tests/python (on PYTHONPATH in the suite)

TIMEOUT_S = 8
W = 3
VICTIM = 2


def rank_main():
    import torch
    import torch.distributed as dist
    import fluxcpp  # noqa: F401

    rank = int(os.environ["RANK"])
    dist.init_process_group("fluxcpp", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    x = torch.ones(1 << 16)
    dist.all_reduce(x)
    if rank == VICTIM:
        os.kill(os.getpid(), signal.SIGKILL if os.environ["FAULT"] == "kill" else signal.SIGSTOP)
    start = time.monotonic()
    try:
        dist.all_reduce(x)
        print(f"rank {rank}: the collective succeeded without rank {VICTIM}", flush=True)
        os._exit(3)
    except RuntimeError as e:
        took = time.monotonic() - start
        named = f"rank {VICTIM}" in str(e)
        print(f"rank {rank}: RuntimeError after {took:.1f} s: {str(e)[:300]}", flush=True)
        os._exit(0 if named and took < TIMEOUT_S + 10 else 4)


def shm_entries():
    return sorted(f for f in os.listdir("/dev/shm") if "fluxcpp" in f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", choices=["mp", "torchrun"], default="mp")
    ap.add_argument("--fault", choices=["kill", "stop"], default="kill")
    a = ap.parse_args()
    before = shm_entries()
    tmp = tempfile.mkdtemp(prefix="fluxcpp_faults_")
    atexit.register(shutil.rmtree, tmp, True)  # its logs and files go with it
    # TMPDIR: torchrun's own log folder (torchelastic_*, never removed by torchrun) goes with ours.
    env = dict(os.environ, FAULT=a.fault, FLUXCPP_FAULTS_RANK="1", TMPDIR=tmp)
    port = str(free_port())
    procs = []
    if a.launcher == "torchrun":
        # The workers' output to files under tmp (--redirects/--tee), read below.
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(W),
               "--master_port", port, "--redirects", "1", "--tee", "1",
               "--log_dir", tmp, os.path.abspath(__file__)]
        procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))
    else:
        for r in range(W):
            e = dict(env, RANK=str(r), WORLD_SIZE=str(W), LOCAL_RANK=str(r),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=e,
                                          start_new_session=True))
    deadline = time.monotonic() + TIMEOUT_S + 90
    status = 0
    # The processes of this job (segment names carry their creator's pid): tests running beside
    # this one have live segments of their own.
    ours = {p.pid for p in procs}
    try:
        if a.launcher == "torchrun":
            # torchrun waits for a stopped worker forever, as it would with gloo: read the
            # survivors' verdicts from its logs instead of waiting for it to exit.
            ok = 0
            while ok < W - 1 and time.monotonic() < deadline and procs[0].poll() is None:
                time.sleep(0.5)
                ours.update(q for p in procs for q in tree(p.pid))
                logs = "".join(open(os.path.join(d, f), errors="replace").read()
                               for d, _, fs in os.walk(tmp) for f in fs if f == "stdout.log")
                ok = sum(f"rank {r}: RuntimeError" in logs for r in range(W) if r != VICTIM)
            named = logs.count(f"waiting for rank {VICTIM}") >= W - 1 if ok else False
            print(f"{ok} of {W - 1} survivors failed naming rank {VICTIM}: {named}")
            status = 0 if ok == W - 1 and named else 1
        else:
            for r, p in enumerate(procs):
                if r == VICTIM:
                    continue
                rc = p.wait(timeout=max(1, deadline - time.monotonic()))
                if rc != 0:
                    print(f"rank {r} exited {rc}")
                    status = 1
    except subprocess.TimeoutExpired:
        print("a survivor hung past the timeout")
        status = 1
    finally:
        for p in procs:
            ours.update(tree(p.pid))
            kill_tree(p.pid)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    time.sleep(0.5)
    left = [f for f in shm_entries() if f not in before and
            any(f.startswith(f"fluxcpp-{pid}-") for pid in ours)]
    if left:
        print(f"left in /dev/shm: {left}")
        status = 1
    print("PASS" if status == 0 else "FAIL")
    return status


if __name__ == "__main__":
    if os.environ.get("FLUXCPP_FAULTS_RANK"):
        rank_main()
    sys.exit(main())
