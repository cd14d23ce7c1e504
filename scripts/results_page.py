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


OPS = (("ag_gemm", "up: all-gather + GEMM"), ("gemm_rs", "down: GEMM + reduce-scatter"),
       ("gemm_ar", "down: GEMM + all-reduce"))


def layer_rows(rows, decode):
    """bench_torch --layer rows, prefill (m >= 64) or decode (m < 64): one line per layer, m and
    dtype; a cell per GEMM: the speedup on a packed weight, the two times, the plain speedup."""
    lines = {}
    for r in rows:
        if "layer" not in r or (r["m"] < 64) != decode:
            continue
        lay = r["layer"]
        key = (lay["hidden"], lay["ffn"], r["m"], r["dtype"])
        line = lines.setdefault(key, {})
        line[r["op"]] = (f"**{r['torch_gloo_ms'] / r['fluxcpp_packed_ms']:.2f}x** "
                         f"{ms(r['fluxcpp_packed_ms'])} vs {ms(r['torch_gloo_ms'])} "
                         f"(plain {r['speedup']:.2f}x)")
        line["mm_" + r["op"]] = ms(r["torch_mm_ms"])
    out = []
    for (hidden, ffn, m, dt), line in lines.items():
        mm = " / ".join(line.get(f"mm_{op}", "–") for op in ("ag_gemm", "gemm_ar"))
        out.append((hidden, ffn, m, dt, mm) + tuple(line.get(op, "– (m < W)") for op, _ in OPS))
    return table(("hidden", "ffn", "m", "dtype", "torch.mm alone, up / down ms")
                 + tuple(f"{what} ({op})" for op, what in OPS), out)


MPI_SIZES = (4 << 10, 256 << 10, 16 << 20)  # of fluxcpp_bench's sweep, in the table


def collective_rows(torch_rows, mpi_rows):
    """One line per collective and size: fluxcpp's time, and the speedup over torch's gloo or
    over MPI where that size was measured (the two benchmarks sweep different sizes)."""
    lines = {}
    for r in torch_rows:
        if "bytes_per_rank" in r:
            lines[(r["op"], r["bytes_per_rank"])] = (
                f"{r['fluxcpp_ms'] * 1e3:.1f}", f"**{r['speedup']:.2f}x** "
                f"({r['torch_gloo_ms'] * 1e3:.0f} µs)", "")
    for r in mpi_rows:
        if r["bytes_per_rank"] in MPI_SIZES:
            lines[(r["op"], r["bytes_per_rank"])] = (
                f"{r['t_fused_ms'] * 1e3:.1f}", "", f"**{r['speedup']:.2f}x** "
                f"({r['t_unfused_ms'] * 1e3:.1f} µs)")
    out = [(op, size(b)) + cells for (op, b), cells in sorted(lines.items())]
    return table(("collective", "bytes per rank", "fluxcpp µs", "vs torch's gloo",
                  "vs MPI"), out)


def link_rows(rows):
    out = []
    for r in rows:
        mode = r.get("variant") or ("packed" if r.get("packed") else
                                    "zero-copy" if r.get("zero_copy") else "copied")
        gemm, move = r.get("t_gemm_ms") or 0, r.get("t_move_ms") or 0
        unfused = r.get("t_unfused_ms") or gemm + move  # the probe's: one after the other
        hidden = r.get("hidden")
        out.append((r["op"], mode, r.get("dtype", "f32"), f"{r['m']}x{r['n']}x{r['k']}",
                    ms(r["t_fused_ms"]), ms(unfused), ms(gemm), ms(move),
                    f"**{unfused / r['t_fused_ms']:.2f}x**",
                    "–" if hidden is None or move < 0.1 * gemm else f"{hidden:.2f}"))
    return table(("op", "input", "dtype", "m x n x k", "fused ms", "unfused ms",
                  "GEMM alone ms", "link alone ms", "speedup", "link time hidden"), out)


def plots(layers, coll_torch, coll_mpi, img, rev):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401
    names = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, dt in zip(axes, ("f32", "bf16")):
        rs = [r for r in layers if r["dtype"] == dt]
        labels = [f"{r['op']}\nH={r['layer']['hidden']} m={r['m']}" for r in rs]
        xs = range(len(rs))
        ax.bar([x - 0.2 for x in xs], [r["torch_gloo_ms"] / r["fluxcpp_packed_ms"] for r in rs],
               0.4, label="fluxcpp, packed weight")
        ax.bar([x + 0.2 for x in xs], [r["speedup"] for r in rs], 0.4, label="fluxcpp, plain")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(list(xs), labels, rotation=90, fontsize=7)
        ax.set_title(f"{dt}: speedup over torch.mm + gloo (TP = 2)")
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.5)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
        ax.legend(fontsize=8)
    fig.suptitle(f"The MLP GEMMs of a tensor-parallel layer, rev {rev}")
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
        f"Measured by `scripts/bench.sh --results` at rev **{rev}** on {meta['date']}: "
        f"{meta['machine']}, 2 ranks of one core each (`torch.set_num_threads(1)` on torch's "
        f"side), load average {meta['load']} before the run. Times are medians of one call "
        f"(max over ranks); every ratio compares two paths of the same run. The JSON is in "
        f"`{os.path.relpath(d)}`.",
        "## My tensor-parallel layer against torch.mm + gloo (prefill)",
        "The two GEMMs of a Llama MLP (up `[m, hidden] x [hidden, ffn/2]`, down `[m, ffn/2] x "
        "[ffn/2, hidden]`) with their communication, fluxcpp's fused op against what a PyTorch "
        "user writes: torch.mm + torch.distributed on gloo (gloo in torch 1.13 sums f32 only, "
        "so bf16 products are reduced in f32). `packed`: the weight as a `PackedWeight`, what "
        "`ColumnParallelLinear` / `RowParallelLinear(packed=True)` run under `torch.no_grad()`."
        " `torch.mm alone`: the rank's GEMM without any communication, the floor torch's path "
        "cannot beat.",
        layer_rows(layers, decode=False),
        "## Decode (m = 1–32 rows)",
        "The same GEMMs at decode sizes: m = 1 has no sequence-parallel split, only the "
        "replicated down projection (GemmAr).",
        layer_rows(layers, decode=True),
        "## Collectives against torch's gloo and MPI",
        "2 ranks on one host: fluxcpp's shared memory against gloo's TCP loopback (torch 1.13, "
        "f32) and against Open MPI's shared-memory transport (`fluxcpp_bench`).",
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
