"""A Hugging Face model as its users launch it, from README.md's recipe ('A Hugging Face model
with tp_plan="auto"'), as written:

1. the recipe's second block must be hf_tp_worker.py's text (after its docstring), so what runs
   here is what the README shows;
2. its first block runs here, in a temporary folder: a small Llama from a config with random
   weights under a fixed seed, save_pretrained (no download);
3. the second block's command line (`scripts/python -m torch.distributed.run --nproc_per_node W
   hf_tp.py tiny-llama`) runs hf_tp_worker.py in that folder with "fluxcpp" (the default) and
   with `--backend gloo` (side by side), each rank saving its greedy tokens and first-step
   logits. Each torchrun gets a free port and a watchdog (its whole tree is killed past it);
4. every rank's tokens must equal one process's (the same folder loaded without tp_plan, the
   same generate call) and gloo's; the first step's logits must be gloo's bit for bit at W = 2
   (an all-reduce of two addends has one result) and one process's within K * eps relative.

    test_hf_tp.py [README.md]"""
import atexit
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM

from procs import free_port, kill_tree  # tests/python (on PYTHONPATH in the suite)

TITLE = 'A Hugging Face model with tp_plan="auto"'
WATCHDOG_S = 150
here = os.path.dirname(os.path.abspath(__file__))
readme = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "README.md")
worker = os.path.join(here, "hf_tp_worker.py")
start = time.monotonic()
failures = []

# 1. The README's blocks, and the worker is the second one.
text = open(readme, encoding="utf-8").read()
section = re.split(r"^#+ " + re.escape(TITLE) + r"\n", text, maxsplit=1, flags=re.M)
if len(section) != 2:
    sys.exit(f"FAIL: README.md has no '{TITLE}' section")
blocks = re.findall(r"```python\n(.*?)```", section[1], re.S)
if len(blocks) < 2:
    sys.exit(f"FAIL: the section '{TITLE}' has no two python blocks")
make_block, run_block = blocks[:2]
worker_text = open(worker, encoding="utf-8").read()
body = worker_text[worker_text.index('"""\n', 3) + 4:]
if body != run_block:
    failures.append("README.md's hf_tp.py block and tests/torch_backend/hf_tp_worker.py differ")

first = run_block.splitlines()[0]
m = re.match(r"# (\w+\.py): (.*)$", first)
if not m:
    sys.exit(f"FAIL: the block's first line names no command: {first!r}")
name, command = m.group(1), shlex.split(m.group(2))
if command[:3] != ["scripts/python", "-m", "torch.distributed.run"] or name not in command:
    sys.exit(f"FAIL: not 'scripts/python -m torch.distributed.run ... {name} ...': {first!r}")
world = int(command[command.index("--nproc_per_node") + 1])
script_args = command[command.index(name) + 1:]
command[0] = sys.executable
command[command.index(name)] = worker

# 2. The model, by the README's first block, in a folder of this test's own.
tmp = tempfile.mkdtemp(prefix="fluxcpp_hf_tp_")
atexit.register(shutil.rmtree, tmp, True)
# torchrun keeps a log folder of its own in the temp dir (torchelastic_*) and never removes it:
# the children take ours, which goes at exit.
os.environ["TMPDIR"] = tmp
cwd = os.getcwd()
os.chdir(tmp)
try:
    exec(compile(make_block, "README.md (tiny_llama.py)", "exec"), {"__name__": "__main__"})
finally:
    os.chdir(cwd)
model_dir = os.path.join(tmp, script_args[0])
print(f"model made in {model_dir} ({time.monotonic() - start:.1f} s)", flush=True)


# 3. The recipe under torchrun, with "fluxcpp" and with gloo side by side (each on a port of its
# own): their interpreters' start-ups overlap (on the loaded 2-core machine: 25 s, not 39 s).
def launch(backend):
    out = os.path.join(tmp, backend)
    os.makedirs(out)
    cmd = command[:3] + [f"--master_port={free_port()}"] + command[3:]
    cmd += ([] if backend == "fluxcpp" else ["--backend", backend]) + ["--out", out]
    print("running:", " ".join(cmd), flush=True)
    log = open(os.path.join(tmp, f"{backend}.log"), "w")
    return subprocess.Popen(cmd, cwd=tmp, stdout=log, stderr=subprocess.STDOUT), log


def finish(backend, proc, log, deadline):
    try:
        rc = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)  # torchrun and its workers (sessions of their own)
        proc.wait()
        rc = f"killed by the {WATCHDOG_S} s watchdog"
    log.close()
    print(f"  {backend}: exit {rc} after {time.monotonic() - launched:.1f} s", flush=True)
    if rc != 0:
        lines = open(log.name, encoding="utf-8", errors="replace").read().splitlines()
        errors = [ln for ln in lines if re.search(r"Error|error:|assert", ln)]
        print("\n".join(["  | " + ln for ln in (errors[-12:] or lines[-30:])]), flush=True)
        failures.append(f"torchrun with {backend}: exit {rc}")
        return None
    return [torch.load(os.path.join(tmp, backend, f"rank{r}.pt")) for r in range(world)]


launched = time.monotonic()
started = {backend: launch(backend) for backend in ("fluxcpp", "gloo")}
runs = {b: finish(b, *started[b], launched + WATCHDOG_S) for b in started}

# 4. One process's generation of the same prompt, then the comparisons.
saved = next((r[0] for r in runs.values() if r), None)
if saved is not None:
    prompt = saved["prompt"]
    steps = saved["tokens"].shape[1] - prompt.shape[1]
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ref = model.generate(prompt, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    ref_tokens, ref_logits = ref.sequences, ref.logits[0]
    k = max(model.config.intermediate_size, model.config.hidden_size)
    tol = k * torch.finfo(torch.float32).eps * ref_logits.abs().max().item()
    print(f"one process: {ref_tokens[0].tolist()} (K = {k}, logits tolerance {tol:.2e})")
    for backend, ranks in runs.items():
        for r, got in enumerate(ranks or []):
            diff = (got["logits"] - ref_logits).abs().max().item()
            same = torch.equal(got["tokens"], ref_tokens)
            print(f"{backend} rank {r}: {got['tokens'][0].tolist()} "
                  f"({'=' if same else 'DIFFERENT from'} one process's), logits off by {diff:.2e}")
            if not same:
                failures.append(f"{backend} rank {r}: tokens differ from one process's")
            if not diff <= tol:
                failures.append(f"{backend} rank {r}: first-step logits off by {diff:.2e} > {tol:.2e}")
    if runs["fluxcpp"] and runs["gloo"]:
        for r, (ours, theirs) in enumerate(zip(runs["fluxcpp"], runs["gloo"])):
            if not torch.equal(ours["tokens"], theirs["tokens"]):
                failures.append(f"rank {r}: fluxcpp's tokens differ from gloo's")
            if world == 2:
                same = torch.equal(ours["logits"], theirs["logits"])
            else:
                same = torch.allclose(ours["logits"], theirs["logits"], rtol=0, atol=tol)
            if not same:
                failures.append(f"rank {r}: fluxcpp's first-step logits differ from gloo's")

print(f"wall time {time.monotonic() - start:.1f} s")
for f in failures:
    print("FAIL:", f)
print("PASS" if not failures else f"FAIL ({len(failures)})")
sys.exit(1 if failures else 0)
