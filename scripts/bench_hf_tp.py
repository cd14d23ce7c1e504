"""A Hugging Face Llama under tensor parallelism on one host: prefill (TTFT) and decode (time per
output token) of AutoModelForCausalLM.from_pretrained(folder, tp_plan="auto") under torchrun at
W ranks, for
  gloo     the model as transformers splits it, its all-reduces / all-gathers on a gloo group;
  fluxcpp  the same model, the default group made with the "fluxcpp" backend;
  fused    the same processes after the fluxcpp row, the plan's "colwise" / "rowwise" nn.Linear
           layers (q/k/v, gate/up; o, down) swapped for fluxcpp.ColumnParallelLinear (a local
           GEMM on packed weights through a one-rank context) and fluxcpp.RowParallelLinear
           (GemmAr: the GEMM fused with the all-reduce) on fluxcpp.Context.from_group(), holding
           the shards transformers made; the LM head stays transformers' (gathered on the group);
  one      one process, no tp_plan, no group (the reference);
  autotp   with --autotp: the model split by DeepSpeed AutoTP (deepspeed.init_inference with
           tensor_parallel={"tp_size": W}), its all-reduces on DeepSpeed's CPU shared-memory op
           (scripts/peers/hf_autotp.py; scripts/install_deps.sh --peers installs DeepSpeed);
           with it, AutoTP's split on the "fluxcpp" backend (DeepSpeed's op left out: every
           all-reduce a dist.all_reduce on the backend), then in the same processes AutoTP's
           LinearLayer / LinearAllreduce swapped for fluxcpp's layers: fluxcpp against AutoTP on
           the same model code, without transformers' DTensor path.
Random weights from a LlamaConfig (torch.manual_seed(--seed)) saved once with save_pretrained
into a temporary folder (no download), loaded in f32 or bf16. One prompt of --prompt-len random
ids (batch 1) prefilled with the KV cache, then --gen greedy tokens decoded one at a time (the
same model(...) + argmax loop everywhere). Each process times --warmup + --repeat generations; a
time is the slowest rank's; TTFT is the median of the timed prefills, per token the median of
every timed decode step. --rounds N repeats the launches, interleaved: a cell is the median of
the rounds' values, a ratio the median of the rounds' ratios. Every configuration's (and rank's)
greedy tokens must equal the reference's: a mismatch is printed loudly and the exit status is 1.
It prints the CPU's avx512f / avx512_bf16 / amx_bf16 flags, torch's BLAS and the load average
first; above --max-load (1.5) the table has no ratios (a warning instead).

    scripts/bench_hf_tp.sh [--dtypes f32,bf16] [--layers 4] [--hidden 2048] [--ffn 5632]
        [--heads 16] [--kv-heads 8] [--prompt-len 512] [--gen 16] [--rounds 1] [--json FILE]

Threads: --threads per rank (default 1: W ranks on W cores), --ref-threads for the reference
(default --threads). --worker MODE (internal): one process of a configuration."""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

import torch

from hf_tp_report import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = p.add_argument
    a("-np", "--world", type=int, default=2, help="ranks (torchrun --nproc_per_node)")
    a("--dtypes", default="f32,bf16")
    for name, default, what in (
            ("layers", 4, None), ("hidden", 2048, None), ("ffn", 5632, "intermediate_size"),
            ("heads", 16, None), ("kv-heads", 8, None), ("vocab", 32000, None),
            ("prompt-len", 512, None), ("gen", 16, "greedy tokens (the first from the prefill)"),
            ("warmup", 1, None), ("repeat", 3, "timed generations per process"),
            ("rounds", 1, "launches of every configuration, interleaved"),
            ("threads", 1, "torch threads per rank"),
            ("ref-threads", 0, "the reference's torch threads (0: --threads)"), ("seed", 0, None)):
        a(f"--{name}", type=int, default=default, help=what)
    a("--max-load", type=float, default=1.5, help="no ratios above this 1-minute load average")
    a("--timeout", type=float, default=1800, help="seconds per launch before it is killed")
    a("--no-fused", action="store_true", help="skip the fused-layer configuration")
    a("--autotp", action="store_true", help="add DeepSpeed AutoTP (scripts/install_deps.sh --peers)")
    a("--json", help="write the results there")
    a("--keep", help="keep the model folder and the logs in this folder (default: a temporary one)")
    for name in ("worker", "model", "dtype", "out"):  # the driver's call of a worker
        a(f"--{name}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.ref_threads = args.ref_threads or args.threads
    if args.gen < 2 or args.prompt_len < 1:
        p.error("--gen must be >= 2 (one decode step at least), --prompt-len >= 1")
    return args


# ---- the worker: one process of a configuration ------------------------------------------------

def generate(model, prompt, gen):
    """Greedy decoding by hand: (tokens, [prefill s, decode step s, ...]) on this rank."""
    times, tokens = [], []
    t0 = time.perf_counter()
    out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
    tok = out.logits[:, -1].argmax(-1)
    times.append(time.perf_counter() - t0)
    tokens.append(tok)
    for _ in range(gen - 1):
        t0 = time.perf_counter()
        out = model(input_ids=tok[:, None], cache=out.cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1)
        times.append(time.perf_counter() - t0)
        tokens.append(tok)
    return torch.cat(tokens).tolist(), times


def measure(model, prompt, args, dist):
    """--warmup + --repeat generations: the slowest rank's times; whether the ranks agree."""
    runs = []
    for run in range(args.warmup + args.repeat):
        if dist is not None:
            dist.barrier()
        tokens, times = generate(model, prompt, args.gen)
        if run >= args.warmup:
            runs.append(times)
    agree = True
    if dist is not None:  # one collective after the timing: the max over ranks, and token check
        t = torch.tensor(runs, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        runs = t.tolist()
        lo, hi = torch.tensor(tokens), torch.tensor(tokens)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        agree = torch.equal(lo, hi)
    return {"ttft_s": [r[0] for r in runs], "steps_s": [s for r in runs for s in r[1:]],
            "tokens": tokens, "ranks_agree": agree}


def tp_plan_targets(model):
    """(name, style, local weight, local bias) of each nn.Linear model.tp_plan names "colwise" /
    "rowwise": the DTensor's local part (colwise Shard(0), the output features; rowwise Shard(1),
    the input features; a rowwise bias is replicated and added once)."""
    from torch.distributed.tensor import DTensor
    local = (lambda t: t.to_local() if isinstance(t, DTensor) else t)
    plan = [(re.compile(re.escape(k).replace(r"\*", r"\d+") + "$"), v)
            for k, v in model.tp_plan.items()]
    for name, mod in list(model.named_modules()):
        style = next((s for pat, s in plan if pat.match(name)), None)
        if style in ("colwise", "rowwise") and isinstance(mod, torch.nn.Linear):
            yield name, style, local(mod.weight), None if mod.bias is None else local(mod.bias)


def swap_fused(model, ctx, local_ctx, max_m, dtype, targets):
    """Replaces each target (name, "colwise" | "rowwise", this rank's weight [n, k], bias) by
    fluxcpp's column-parallel layer (a local GEMM on packed weights) or row-parallel layer (GemmAr:
    the GEMM fused with the all-reduce) holding that shard. Returns the layers (close them,
    collectively, when done)."""
    import fluxcpp
    from fluxcpp.swap import TPLinear  # an nn.Linear's place: [..., k] -> [..., n]
    layers = []
    for name, style, w, b in list(targets):
        n, k = w.shape
        if style == "colwise":
            lay = fluxcpp.ColumnParallelLinear(ctx, k, n, max_m, bias=b is not None, dtype=dtype,
                                               sequence_parallel=False, packed=True,
                                               local_ctx=local_ctx)
        else:
            lay = fluxcpp.RowParallelLinear(ctx, k, n, max_m, bias=b is not None, dtype=dtype,
                                            sequence_parallel=False, packed=True)
        with torch.no_grad():
            lay.weight.copy_(w)
            if b is not None:
                lay.bias.copy_(b)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, TPLinear(lay))
        layers.append(lay)
    return layers


def measure_fused(model, targets, prompt, args, dtype, dist):
    """measure() with the targets swapped for fluxcpp's layers on the default group's context."""
    import fluxcpp
    ctx = fluxcpp.Context.from_group()
    local_ctx = fluxcpp.Context.local(compute_threads=args.threads)
    layers = swap_fused(model, ctx, local_ctx, args.prompt_len, dtype, targets)
    with torch.inference_mode():
        result = measure(model, prompt, args, dist)
    result["layers_swapped"] = len(layers)
    for lay in layers:
        lay.close()
    local_ctx.close()
    ctx.close()
    return result


def worker(args):
    from transformers import AutoModelForCausalLM
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    g = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(0, args.vocab, (1, args.prompt_len), generator=g)
    results, rank = {}, 0
    t0 = time.perf_counter()
    if args.worker == "autotp":
        sys.path.insert(0, os.path.join(ROOT, "scripts", "peers"))
        import hf_autotp
        rank, load_s, results = hf_autotp.run(args, dtype, prompt, measure)
    elif args.worker == "autotp_fluxcpp":
        sys.path.insert(0, os.path.join(ROOT, "scripts", "peers"))
        import hf_autotp
        import fluxcpp  # noqa: F401  (registers "fluxcpp")
        import torch.distributed as dist
        fused = None if args.no_fused else (lambda model, targets: measure_fused(
            model, targets, prompt, args, dtype, dist))
        rank, load_s, results = hf_autotp.run(args, dtype, prompt, measure, "fluxcpp", fused)
    elif args.worker == "one":
        torch.set_num_threads(args.ref_threads)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
        load_s = time.perf_counter() - t0
        with torch.inference_mode():
            results["one"] = measure(model, prompt, args, None)
    else:
        import torch.distributed as dist
        import fluxcpp  # registers "fluxcpp"
        torch.set_num_threads(args.threads)
        dist.init_process_group(args.worker)  # before from_pretrained (else it makes gloo's)
        rank = dist.get_rank()
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, tp_plan="auto")
        load_s = time.perf_counter() - t0
        with torch.inference_mode():
            results[args.worker] = measure(model, prompt, args, dist)
        if args.worker == "fluxcpp" and not args.no_fused:
            results["fused"] = measure_fused(model, tp_plan_targets(model), prompt, args, dtype,
                                             dist)
        dist.destroy_process_group()
    if rank == 0:
        for r in results.values():
            r["load_s"] = load_s
        with open(args.out, "w") as f:
            json.dump(results, f)
    if args.worker.startswith("autotp"):  # torch 2.15 may abort at exit after a clean destroy (batch.py)
        sys.stdout.flush()
        os._exit(0)


# ---- the driver --------------------------------------------------------------------------------

def machine_info():
    flags = set()
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            elif line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
    show = torch.__config__.show()
    blas = re.findall(r"(?:BLAS_INFO|LAPACK_INFO)=[^,\s]*", show)
    blas += [ln.strip(" -") for ln in show.splitlines() if re.search(r"Math Kernel|MKL-DNN", ln)]
    return {"cpu": model, "cpus": os.cpu_count(),
            "flags": {f: f in flags for f in ("avx512f", "avx512_bf16", "amx_bf16")},
            "torch": torch.__version__, "blas": blas, "load_avg_start": os.getloadavg()}


def make_model(args, folder):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=args.ffn, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                         max_position_embeddings=max(2048, args.prompt_len + args.gen))
    LlamaForCausalLM(config).save_pretrained(folder)


def launch(args, mode, dtype, folder, work, tag):
    """One configuration's processes; their rank 0's results (None when the launch failed)."""
    out, log = (os.path.join(work, f"{tag}.{ext}") for ext in ("json", "log"))
    worker_args = [os.path.abspath(__file__), "--worker", mode, "--model", folder, "--dtype",
                   dtype, "--out", out] + [f"--{k}={v}" for k, v in (
                       ("vocab", args.vocab), ("prompt-len", args.prompt_len), ("gen", args.gen),
                       ("warmup", args.warmup), ("repeat", args.repeat), ("seed", args.seed),
                       ("threads", args.threads), ("ref-threads", args.ref_threads))]
    worker_args += ["--no-fused"] if args.no_fused else []
    cmd = [sys.executable] + worker_args
    if mode != "one":
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            cmd[1:1] = ["-m", "torch.distributed.run", f"--nproc_per_node={args.world}",
                        f"--master_port={sock.getsockname()[1]}"]
    env = dict(os.environ, TMPDIR=work)  # torchrun's own log folder (never removed) goes with the run's
    if mode.startswith("autotp"):  # DeepSpeed's CPU accelerator; its shared-memory op needs LOCAL_SIZE = W
        env.update(DS_ACCELERATOR="cpu", LOCAL_SIZE=str(args.world), TORCH_EXTENSIONS_DIR=env.get(
            "TORCH_EXTENSIONS_DIR", os.path.join(ROOT, "build", "peers", "torch_extensions")))
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # torchrun stops its workers
            proc.wait()
            rc = f"stopped after {args.timeout:.0f} s"
    took = time.monotonic() - t0
    print(f"  {tag}: exit {rc} in {took:.1f} s", file=sys.stderr, flush=True)
    if rc != 0 or not os.path.exists(out):
        lines = open(log, errors="replace").read().splitlines()
        print("\n".join("  | " + ln for ln in lines[-25:]), file=sys.stderr)
        # The last error line, kept for the table: a configuration that cannot run says why.
        # torchrun's own summary (ChildFailedError) names only signals: a worker's line first.
        found = [ln.strip() for ln in lines if re.search(r"(Error|Exception)\b.*:|terminate called|"
                                                         r"exitcode +: -?\d+ ", ln)
                 and "ChildFailedError" not in ln]
        why = "; ".join(dict.fromkeys(found[-3:])) or (lines[-1].strip() if lines else "no output")
        return {mode: {"error": f"exit {rc}: {why}"}}
    with open(out) as f:
        return {k: dict(r, wall_s=took) for k, r in json.load(f).items()}


def driver(args):
    info = machine_info()
    load = info["load_avg_start"][0]
    ratios_ok = load <= args.max_load
    print(f"CPU: {info['cpu']}, {info['cpus']} CPUs; "
          + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in info["flags"].items()))
    print(f"torch {info['torch']}: " + "; ".join(info["blas"]))
    print("load average at start: " + " ".join(f"{x:.2f}" for x in info["load_avg_start"]))
    if not ratios_ok:
        print(f"WARNING: load average {load:.2f} > {args.max_load}: the machine is busy, the "
              "times are not comparable; no ratios reported", flush=True)
    # torch's own GEMM at the MLP's prefill shape against fluxcpp's engine (fluxcpp.baseline).
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    from fluxcpp import baseline
    for dtype in args.dtypes.split(","):
        slow = baseline.check({"f32": torch.float32, "bf16": torch.bfloat16}[dtype],
                              args.prompt_len, args.ffn // args.world, args.hidden, args.threads)
        if slow:
            print(f"(!) {slow}", flush=True)
    env = os.environ
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "build", "python"),
                                                     env.get("PYTHONPATH")) if p)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.pop("OMP_NUM_THREADS", None)
    tmp = None if args.keep else tempfile.TemporaryDirectory(prefix="bench_hf_tp_")
    work = args.keep or tmp.name
    os.makedirs(work, exist_ok=True)
    folder = os.path.join(work, "model")
    t0 = time.monotonic()
    make_model(args, folder)
    print(f"model: LlamaConfig(hidden {args.hidden}, intermediate {args.ffn}, heads {args.heads}, "
          f"kv heads {args.kv_heads}, layers {args.layers}, vocab {args.vocab}), random weights "
          f"(seed {args.seed}) saved in {time.monotonic() - t0:.1f} s; W={args.world}, "
          f"{args.threads} thread(s) per rank, reference {args.ref_threads}; prompt "
          f"{args.prompt_len}, batch 1, {args.gen} tokens, {args.warmup} warm-up + "
          f"{args.repeat} timed generations per process, {args.rounds} round(s)", flush=True)
    dtypes = [d for d in args.dtypes.split(",") if d]
    modes = (("gloo",) + (("autotp", "autotp_fluxcpp") if args.autotp else ()) +
             ("fluxcpp", "one"))
    results = {d: [] for d in dtypes}
    for rnd in range(args.rounds):
        for dtype in dtypes:
            print(f"== round {rnd + 1}, {dtype}", file=sys.stderr, flush=True)
            got = {}
            for mode in modes:
                got.update(launch(args, mode, dtype, folder, work, f"{dtype}.{mode}.{rnd}") or {})
            results[dtype].append(got)
    if tmp is not None:
        tmp.cleanup()
    return report(args, info, results, ratios_ok)



if __name__ == "__main__":
    a = parse_args()
    if a.worker:
        worker(a)
    else:
        sys.exit(driver(a))
