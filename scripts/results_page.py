#!/usr/bin/python3
"""docs/benchmarks.md's results (the part above its lab notes) and its plots, from the JSON of one
run of `scripts/bench.sh --results DIR` (default DIR: docs/data/results).

Usage: /usr/bin/python3 scripts/results_page.py [DIR] [--page docs/benchmarks.md]
       [--img docs/img] [--print]
DIR holds meta.json (revision, date, machine, load) and the JSON lines of the benchmarks:
layers.jsonl (scripts/bench_torch.py --layer), collectives_torch.jsonl (bench_torch.py
--collectives), collectives_mpi.jsonl and link_<op>.jsonl (fluxcpp_bench). The page's text between
the markers RESULTS_BEGIN and RESULTS_END is replaced; --print writes the tables to stdout
instead (what scripts/bench.sh shows at the end)."""
import argparse
import json
import os
import re
import sys

BEGIN, END = "<!-- RESULTS_BEGIN: made by scripts/results_page.py -->", "<!-- RESULTS_END -->"


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def ms(t):
    return f"{t:.3f}" if t < 1 else f"{t:.2f}" if t < 10 else f"{t:.1f}"


def size(b):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n:
            return f"{b / n:g} {unit}"
    return f"{b} B"


PACKED_MAX_ROWS, PACKED_MAX_BYTES = 128, 16 << 20  # fluxcpp.autograd's (packed=True layers)


def layer_reads_plain(hidden, ffn, m, dtype):
    """Whether a packed=True layer reads its weight tensor (fluxcpp.autograd's rule)."""
    return dtype == "bf16" and m >= PACKED_MAX_ROWS and hidden * (ffn // 2) * 2 > PACKED_MAX_BYTES
MODES = (("replicated", "local", "gemm_ar"), ("sequence parallel", "ag_gemm", "gemm_rs"))


def layers_of(rows):
    """{(hidden, ffn, m, dtype): {op: row}} of bench_torch --layer rows."""
    out = {}
    for r in rows:
        if "layer" in r:
            lay = r["layer"]
            out.setdefault((lay["hidden"], lay["ffn"], r["m"], r["dtype"]), {})[r["op"]] = r
    return out


def mode_times(ops, up, down):
    """(fluxcpp packed, fluxcpp plain, torch) ms of a layer's up + down GEMMs, or None."""
    if up not in ops or down not in ops:
        return None
    u, d = ops[up], ops[down]
    return (u["fluxcpp_packed_ms"] + d["fluxcpp_packed_ms"], u["fluxcpp_ms"] + d["fluxcpp_ms"],
            u["torch_gloo_ms"] + d["torch_gloo_ms"])


def layer_rows(rows, decode):
    """One line per layer, m and dtype (prefill: m >= 64, decode: m < 64): per mode, the up and
    down GEMMs with their communication, fluxcpp on packed weights against torch."""
    out = []
    for (hidden, ffn, m, dt), ops in layers_of(rows).items():
        if (m < 64) != decode:
            continue
        mm = sum(ops[o]["torch_mm_ms"] for o in ("local", "gemm_ar") if o in ops)
        cells = []
        for _, up, down in MODES:
            t = mode_times(ops, up, down)
            if t is None:
                cells.append("– (m < W)")
                continue
            layer = t[1] if layer_reads_plain(hidden, ffn, m, dt) else t[0]  # packed=True
            # torch's GEMM far below the engine at this shape (fluxcpp.baseline): flagged; the
            # baseline is torch's oneDNN linear where torch.mm was slower: marked.
            slow = any(ops[o].get("baseline_warning") for o in (up, down))
            onednn = any(ops[o].get("torch_gemm", "torch.mm") != "torch.mm" for o in (up, down))
            mark = (" (!) slow torch GEMM" if slow else "") + (" ¹" if onednn else "")
            cells.append(f"**{t[2] / layer:.2f}x**{mark} "
                         f"{ms(layer)} vs {ms(t[2])} "
                         f"(packed {t[2] / t[0]:.2f}x, plain {t[2] / t[1]:.2f}x)")
        out.append((hidden, ffn, m, dt, ms(mm)) + tuple(cells))
    return table(("hidden", "ffn", "m", "dtype", "torch GEMM alone ms")
                 + tuple(f"{name}: fluxcpp vs torch ms" for name, _, _ in MODES), out)


MPI_SIZES = (4, 64, 1024, 16384)  # KiB of fluxcpp_bench's sweep shown in the table


def collective_rows(torch_rows, mpi_rows):
    """One line per collective and size (bytes rounded to KiB: fluxcpp_bench writes 6 digits):
    fluxcpp's time, and the speedup over torch's gloo and over MPI where measured."""
    lines = {}
    for r in torch_rows:
        if "bytes_per_rank" in r:
            cell = lines.setdefault((r["op"], round(r["bytes_per_rank"] / 1024)), ["", "", ""])
            cell[0] = cell[0] or f"{r['fluxcpp_ms'] * 1e3:.1f}"
            cell[1] = f"**{r['speedup']:.2f}x** ({r['torch_gloo_ms'] * 1e3:.0f} µs)"
    for r in mpi_rows:
        kib = round(r["bytes_per_rank"] / 1024)
        if kib in MPI_SIZES:
            cell = lines.setdefault((r["op"], kib), ["", "", ""])
            cell[0] = cell[0] or f"{r['t_fused_ms'] * 1e3:.1f}"
            cell[2] = f"**{r['speedup']:.2f}x** ({r['t_unfused_ms'] * 1e3:.1f} µs)"
    out = [(op, size(kib * 1024)) + tuple(c or "–" for c in cells)
           for (op, kib), cells in sorted(lines.items())]
    return table(("collective", "bytes per rank", "fluxcpp µs", "vs torch's gloo",
                  "vs MPI"), out)


def link_rows(rows):
    out = []
    for r in rows:
        mode = r.get("variant") or ("packed" if r.get("packed") else
                                    "zero-copy" if r.get("zero_copy") else "copied")
        gemm, move = r.get("t_gemm_ms") or 0, r.get("t_move_ms") or 0
        unfused = r["t_unfused_ms"] if r.get("t_unfused_ms") is not None else gemm + move
        hidden = r.get("hidden")
        out.append((r["op"], mode, r.get("dtype", "f32"), f"{r['m']}x{r['n']}x{r['k']}",
                    ms(r["t_fused_ms"]), ms(unfused), ms(gemm), ms(move),
                    f"**{unfused / r['t_fused_ms']:.2f}x**",
                    "–" if hidden is None or move < 0.1 * gemm or hidden < 0
                    else f"{hidden:.2f}"))
    return table(("op", "input", "dtype", "m x n x k", "fused ms", "unfused ms",
                  "GEMM alone ms", "link alone ms", "speedup", "link time hidden"), out)


def plots(layers, coll_torch, coll_mpi, img, rev):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401
    names = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    lays = layers_of(layers)

    def speedup(k, up, down):  # what packed=True layers run, as the table's bold figure
        t = mode_times(lays[k], up, down)
        return 0 if t is None else t[2] / (t[1] if layer_reads_plain(*k) else t[0])
    top = max([speedup(k, up, down) for k in lays for _, up, down in MODES] + [1.0])
    for ax, dt in zip(axes, ("f32", "bf16")):
        keys = [k for k in lays if k[3] == dt]
        xs = range(len(keys))
        for i, (name, up, down) in enumerate(MODES):
            ax.bar([x + (i - 0.5) * 0.4 for x in xs], [speedup(k, up, down) for k in keys], 0.4,
                   label=f"{name} (packed=True)")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(list(xs), [f"H={k[0]}\nm={k[2]}" for k in keys], fontsize=7)
        ax.set_title(f"{dt}: layer MLP speedup over torch's GEMM + gloo (TP = 2)")
        ax.set_yscale("log")
        ax.set_ylim(0.5, top * 1.15)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.legend(fontsize=8)
    fig.suptitle(f"The two MLP GEMMs of a tensor-parallel layer with their communication, "
                 f"rev {rev}")
    fig.tight_layout()
    names.append("results_layers.png")
    fig.savefig(os.path.join(img, names[-1]), dpi=90)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ops = sorted({r["op"] for r in coll_torch + coll_mpi if "bytes_per_rank" in r})
    colors = {op: f"C{i}" for i, op in enumerate(ops)}
    for src, rs, style in (("torch's gloo", coll_torch, "-o"),
                           ("MPI", [r for r in coll_mpi if r["dtype"] == "f32"], "--s")):
        for op in ops:
            pts = sorted((r["bytes_per_rank"], r["speedup"]) for r in rs
                         if r["op"] == op and "bytes_per_rank" in r)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colors[op],
                        label=f"{op} vs {src}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("speedup of fluxcpp")
    ax.set_title(f"Collectives, 2 ranks on one host, f32, rev {rev}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    names.append("results_collectives.png")
    fig.savefig(os.path.join(img, names[-1]), dpi=90)
    plt.close(fig)
    return names


def render(d, img, rel_img):
    meta = json.load(open(os.path.join(d, "meta.json")))
    layers = load(os.path.join(d, "layers.jsonl"))
    coll_torch = load(os.path.join(d, "collectives_torch.jsonl"))
    coll_mpi = load(os.path.join(d, "collectives_mpi.jsonl"))
    link = [r for name in sorted(os.listdir(d)) if name.startswith("link_")
            and name.endswith(".jsonl") for r in load(os.path.join(d, name))]
    rev = meta["rev"]
    pics = plots(layers, coll_torch, coll_mpi, img, rev) if img else []
    parts = [
        f"Measured by `{meta.get('producer', 'scripts/bench.sh --results')}` at rev **{rev}** "
        f"on {meta['date']}: {meta['machine']}"
        + (f", {meta['torch']}" if meta.get("torch") else "") +
        f", 2 ranks of one core each (`torch.set_num_threads(1)` on torch's "
        f"side), load average {meta['load']} before the run. Times are medians of one call "
        f"(max over ranks); every ratio compares two paths of the same run. The JSON is in "
        f"`{os.path.relpath(d)}`.",
        "## My tensor-parallel layer against torch's GEMM + gloo (prefill)",
        "The two GEMMs of a Llama MLP split over 2 ranks (up `[m, hidden] x [hidden, ffn/2]`, "
        "down `[m, ffn/2] x [ffn/2, hidden]`) with their communication, per call, fluxcpp "
        "against what a PyTorch user writes with torch's GEMM + torch.distributed on gloo. "
        "torch's GEMM is its fastest on this machine at each shape and dtype "
        "(`fluxcpp.baseline.TorchGemm`): torch.mm, or, marked ¹, torch's own oneDNN linear "
        "(`torch.utils.mkldnn`, the weight in oneDNN's layout) where that is faster — the MKL "
        "inside PyPI's torch runs f32 at about half of oneDNN's speed on non-Intel CPUs, so "
        "these rows depend on the CPU named above; a baseline still below half fluxcpp's "
        "engine is marked (!). bf16 rows depend on the CPU's bf16 features (AVX512-BF16, AMX: "
        "up to 10x apart between machines). **Replicated** "
        "(Megatron's tensor parallelism, every rank holds all m tokens; the README's "
        "`my_layer.py`): up is each rank's local GEMM (fluxcpp: `ColumnParallelLinear` with "
        "`local_ctx`; torch: its GEMM), down the GEMM + all-reduce (`RowParallelLinear`, "
        "GemmAr; torch: GEMM + all_reduce). **Sequence parallel** (tokens split between "
        "the layers): up all-gather + GEMM (AgGemm; torch: all_gather + GEMM), down GEMM + "
        "reduce-scatter (GemmRs; torch: GEMM + all_reduce + this rank's rows), under "
        "`torch.no_grad()`: fluxcpp on packed weights (`packed`) and on the weight "
        "tensors (`plain`); the bold figure is what the layers with `packed=True` run (the packed weight, "
        "except a bf16 weight over 16 MiB at 128 rows or more: the weight tensor). `torch GEMM alone`: the two GEMMs without any communication, the floor of "
        "torch's path. The JSON has each GEMM's row.",
        layer_rows(layers, decode=False),
        "## Decode (m = 1–32 rows)",
        "The same layers at decode sizes (m = 1 cannot be split over 2 ranks: replicated "
        "only).",
        layer_rows(layers, decode=True),
        "## Collectives against torch's gloo and MPI",
        "2 ranks on one host: fluxcpp's shared memory against gloo's TCP loopback (torch's "
        "gloo, f32) and against Open MPI's shared-memory transport (`fluxcpp_bench`).",
        collective_rows(coll_torch, coll_mpi),
        "## Over a link: 2 hosts joined by a shaped 10 Gbit/s link",
        "One rank per simulated host in a private network namespace, MPI over TCP "
        "(`scripts/link_run.sh 10gbit`), the fused op against the unfused path on the same "
        "engine (one oneDNN call + the MPI collective). `link_probe` is what a minimal "
        "implementation hides on this link in the same run (TCP costs the core most of a "
        "transfer, so the ceiling is well below 1). "
        + ("" if link else "*Not measured in this run (no network namespaces here).*"),
        link_rows(link) if link else "",
    ]
    for p in pics:
        parts.append(f"![{p}]({rel_img}/{p})")
    return "\n\n".join(p for p in parts if p) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default="docs/data/results")
    ap.add_argument("--page", default="docs/benchmarks.md")
    ap.add_argument("--img", default="docs/img")
    ap.add_argument("--print", action="store_true", help="the tables to stdout, no page")
    args = ap.parse_args()
    if args.print:
        sys.stdout.write(render(args.dir, None, None))
        return
    text = open(args.page).read()
    if BEGIN not in text or END not in text:
        sys.exit(f"{args.page} has no {BEGIN} ... {END} markers")
    rel = os.path.relpath(args.img, os.path.dirname(args.page))
    body = render(args.dir, args.img, rel)
    text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END),
                  lambda _: f"{BEGIN}\n\n{body}\n{END}", text, flags=re.S)
    open(args.page, "w").write(text)
    print(f"wrote {args.page} and its plots in {args.img}")


if __name__ == "__main__":
    main()
