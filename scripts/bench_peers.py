"""fluxcpp against the collectives CPU users pick for tensor-parallel inference, the same tensors
through each, on local ranks of this host, W = 2 and 4:
  fluxcpp         torch.distributed on the "fluxcpp" backend (dist.all_reduce, ...);
  fluxcpp_module  fluxcpp's Python module (fluxcpp.AllReduce / AllGather / ReduceScatter);
  deepspeed_shm   DeepSpeed's CPU shared-memory all-reduce (deepspeed.comm.inference_all_reduce);
  oneccl          oneCCL's CPU allreduce / allgather / reduce_scatter (its C++ API:
                  scripts/peers/oneccl_bench.cpp, built by scripts/bench_peers.sh);
  gloo            torch 2.x's gloo backend.
Sizes 4 B .. 64 MiB (per rank; an all-gather's input, a reduce-scatter's input), f32 and bf16.
Each peer's first call is checked against the closed-form sum; a time is the median over
--rounds of the slowest rank's mean call in a batch of at least 4 ms (sized per peer by timed
warm-up batches; the same count on every rank). One thread per rank. A peer that cannot run is in the
table with its exact error. Large all-reduces are also given as a fraction of the copy bound:
2 x the time of one copy of the same bytes by every rank at once, timed by the ranks in the same
rounds as the peers (an all-reduce moves at least ~2 passes of the data per rank, every rank at
the same time; this VM's memory speed moves by up to 1.7x within minutes, so the bound is taken
beside the calls it bounds).

    scripts/bench_peers.sh [-np 2,4] [--dtypes f32,bf16] [--max-bytes N] [--rounds 3]
        [--peers fluxcpp,fluxcpp_module,deepspeed_shm,oneccl,gloo] [--json FILE]
        [--results DIR [--page docs/benchmarks.md]]
    scripts/python scripts/bench_peers.py --report DIR [--page PAGE]   # a stored run's tables
--results DIR keeps peers.jsonl and meta.json there and, with --page, rewrites that page's text
between its PEERS_BEGIN and PEERS_END markers."""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts", "peers"))
from peers_table import render  # noqa: E402

PEERS = ("fluxcpp", "fluxcpp_module", "deepspeed_shm", "oneccl", "gloo")
BEGIN, END = "<!-- PEERS_BEGIN: made by scripts/bench_peers.py -->", "<!-- PEERS_END -->"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_all(procs, timeout):
    """Exit codes ("timeout after N s" for the ones killed when the time ran out)."""
    end = time.monotonic() + timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(1, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for i, p in enumerate(procs):
        if codes[i] is None:
            p.kill()
            p.wait()
            codes[i] = f"timeout after {timeout:.0f} s"
    return codes


def tail(path, n=6):
    try:
        lines = [ln for ln in open(path, errors="replace").read().splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def run_torch(a, world, peers, work):
    """The torch-side peers at W ranks: their JSON rows, and an error row when a launch failed."""
    out = os.path.join(work, f"torch.{world}.jsonl")
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
               LOCAL_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
               DS_ACCELERATOR="cpu", GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
    procs, logs = [], []
    for r in range(world):
        logs.append(os.path.join(work, f"torch.{world}.{r}.log"))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "scripts", "peers", "torch_peers.py"), "--out", out,
             "--peers", ",".join(peers), "--dtypes", a.dtypes, "--max-bytes", str(a.max_bytes),
             "--rounds", str(a.rounds)],
            env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=open(logs[-1], "w"),
            stderr=subprocess.STDOUT))
    codes = wait_all(procs, a.timeout)
    # DeepSpeed's op never unlinks its segments (named by user id, address, port and rank).
    for name in os.listdir("/dev/shm"):
        if name.startswith(f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_"):
            os.unlink(os.path.join("/dev/shm", name))
    rows = [json.loads(ln) for ln in open(out)] if os.path.exists(out) else []
    if any(c != 0 for c in codes):
        bad = next(i for i, c in enumerate(codes) if c != 0)
        rows.append(dict(peer="torch ranks", world=world,
                         error=f"rank {bad} exit {codes[bad]}: {tail(logs[bad])}"))
    return rows


def run_oneccl(a, world, work):
    binary = os.path.join(ROOT, "build", "peers", "oneccl_bench")
    if not os.path.exists(binary):
        why = tail(os.path.join(ROOT, "build", "peers", "oneccl_build.log"), 4)
        return [dict(peer="oneccl", world=world,
                     error=f"no {os.path.relpath(binary, ROOT)}: {why or 'not built'}")]
    kvs = os.path.join(work, f"oneccl.{world}.kvs")
    # oneCCL on libfabric (Debian's libfabric1), its shared-memory provider for the ranks of one
    # host; no launcher of its own (the ranks are ours); one worker thread per rank, which
    # yields (sched_yield) while it waits: spinning, it takes the core its rank runs on.
    env = dict(os.environ, CCL_PROCESS_LAUNCHER="none", CCL_ATL_TRANSPORT="ofi", CCL_ATL_SHM="1",
               CCL_WORKER_COUNT="1", CCL_YIELD="sched_yield", CCL_LOCAL_SIZE=str(world),
               CCL_LOG_LEVEL="error")
    procs, logs = [], []
    out = os.path.join(work, f"oneccl.{world}.jsonl")
    for r in range(world):
        logs.append(os.path.join(work, f"oneccl.{world}.{r}.log"))
        procs.append(subprocess.Popen(
            [binary, str(r), str(world), kvs, a.dtypes, str(a.max_bytes), str(a.rounds)],
            env=dict(env, CCL_LOCAL_RANK=str(r)), stdout=open(out if r == 0 else os.devnull, "w"),
            stderr=open(logs[-1], "w")))
    codes = wait_all(procs, a.timeout)
    rows = [json.loads(ln) for ln in open(out) if ln.startswith("{")]
    if any(c != 0 for c in codes):
        bad = next(i for i, c in enumerate(codes) if c != 0)
        rows.append(dict(peer="oneccl", world=world,
                         error=f"rank {bad} exit {codes[bad]}: {tail(logs[bad])}"))
    return rows


def machine():
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    from fluxcpp import baseline
    return baseline.describe()


def versions():
    out = []
    for mod in ("torch", "deepspeed"):
        try:
            out.append(f"{mod} {__import__(mod).__version__}")
        except Exception as e:
            out.append(f"{mod}: {type(e).__name__}: {e}")
    try:
        from importlib.metadata import version
        out.append(f"oneccl-cpu {version('oneccl-cpu')}")
    except Exception as e:
        out.append(f"oneccl-cpu: {type(e).__name__}: {e}")
    return ", ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-np", default="2,4", help="world sizes, comma separated")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per launch")
    ap.add_argument("--json", help="every row as JSON lines")
    ap.add_argument("--results", help="keep peers.jsonl and meta.json in this folder")
    ap.add_argument("--page", help="with --results: rewrite this page's PEERS_BEGIN..END text")
    ap.add_argument("--report", metavar="DIR", help="measure nothing: the tables of a stored run "
                    "(DIR's peers.jsonl and meta.json); with --page, that page's text remade")
    a = ap.parse_args()
    if a.report:
        with open(os.path.join(a.report, "meta.json")) as f:
            meta = json.load(f)
        with open(os.path.join(a.report, "peers.jsonl")) as f:
            text = render(meta, [json.loads(line) for line in f if line.strip()])
        if a.page:
            write_page(a.page, text)
        else:
            sys.stdout.write(text)
        return 0
    peers = [p for p in a.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        ap.error(f"unknown peers {sorted(unknown)}; known: {','.join(PEERS)}")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip() or "unknown"
    meta = dict(rev=rev, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                machine=machine(), versions=versions(), cores=os.cpu_count(),
                load_start=" ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"# machine: {meta['machine']}\n# {meta['versions']}\n# load average at start: "
          f"{meta['load_start']}", flush=True)
    rows = []
    failed = os.path.join(ROOT, "build", "peers", "install_failed.log")
    if os.path.exists(failed):  # bench_peers.sh could not install the peers: say so first
        rows.append(dict(peer="install (scripts/install_deps.sh --peers)", world=0,
                         error=tail(failed, 4)))
    work = tempfile.mkdtemp(prefix="bench_peers_")
    try:
        for world in (int(w) for w in a.np.split(",")):
            over = world > os.cpu_count()
            print(f"== W={world}" + (f": OVERSUBSCRIBED ({world} ranks on {os.cpu_count()} cores; "
                                     "every peer's waits compete for the cores)" if over else ""),
                  file=sys.stderr, flush=True)
            torch_peers = [p for p in peers if p != "oneccl"]
            t0 = time.monotonic()
            if torch_peers:
                rows += [dict(r, oversubscribed=over) for r in run_torch(a, world, torch_peers, work)]
            if "oneccl" in peers:
                rows += [dict(r, oversubscribed=over) for r in run_oneccl(a, world, work)]
            print(f"   W={world} done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    meta["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = render(meta, rows)
    sys.stdout.write(text)
    if a.json:
        with open(a.json, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    if a.results:
        os.makedirs(a.results, exist_ok=True)
        with open(os.path.join(a.results, "peers.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        with open(os.path.join(a.results, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
        if a.page:
            write_page(a.page, text)
    wrong = [r for r in rows if r.get("ok") is False and "error" not in r]
    for r in wrong:
        print(f"!!! WRONG: {r['peer']} {r['op']} {r['dtype']} {r['bytes']} B W={r['world']}: "
              f"{r['wrong']} wrong elements")
    return 1 if wrong else 0


def write_page(path, text):
    """Replaces the text between the page's PEERS_BEGIN and PEERS_END markers."""
    page = open(path).read()
    if BEGIN not in page or END not in page:
        sys.exit(f"{path} has no {BEGIN} ... {END} markers")
    page = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END),
                  lambda _: f"{BEGIN}\n\n{text}\n{END}", page, flags=re.S)
    open(path, "w").write(page)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
