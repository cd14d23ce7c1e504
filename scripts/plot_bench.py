#!/usr/bin/python3
"""Plots from benchmark JSON lines: fluxcpp_bench --json (and scripts/bench_torch.py --json).

Usage: /usr/bin/python3 scripts/plot_bench.py BENCH.jsonl [--torch TORCH.jsonl] [--out DIR]
       [--format png|svg]
Writes into DIR (default docs/img):
  speedup_<hosts>h[_<link>].<fmt>  fused ops: speedup over the unfused path (MPI + one BLAS
                                   call) vs shape, one panel per op, per host layout and link
  bandwidth.<fmt>                  collectives: algorithm bandwidth vs bytes per rank, fluxcpp
                                   (solid) vs MPI (dashed) vs torch gloo (dotted, with --torch)
  vs_torch.<fmt>                   (with --torch) fluxcpp vs torch + gloo: speedup per op and shape
"""
import argparse
import collections
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLLECTIVES = ("all_gather", "reduce_scatter", "all_to_all_single")


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def shape_label(r):
    return f"{r['m']}x{r['n']}x{r['k']}"


def plot_speedup(rows, out_dir, fmt):
    groups = collections.defaultdict(list)
    for r in rows:
        if "k" in r and r.get("speedup") is not None and r["op"] not in COLLECTIVES:
            groups[(r.get("hosts", 1), r.get("link") or "", r.get("world", 0))].append(r)
    written = []
    for (hosts, link, world), rs in sorted(groups.items()):
        ops = sorted({r["op"] for r in rs})
        fig, axes = plt.subplots(len(ops), 1, figsize=(8, 2.2 * len(ops) + 0.8), squeeze=False)
        for ax, op in zip(axes[:, 0], ops):
            sel = [r for r in rs if r["op"] == op]
            labels = [shape_label(r) + (" zc" if r.get("zero_copy") else "") +
                      (f" {r['dtype']}" if r.get("dtype") not in (None, "f32") else "")
                      for r in sel]
            vals = [r["speedup"] for r in sel]
            colors = ["tab:green" if v >= 1 else "tab:red" for v in vals]
            ax.bar(range(len(sel)), vals, color=colors)
            for i, v in enumerate(vals):
                ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xticks(range(len(sel)))
            ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
            ax.set_ylabel("speedup")
            ax.set_title(op, fontsize=9, loc="left")
        where = f"{world} ranks, {hosts} host{'s' if hosts != 1 else ''}" + \
            (f", {link} link" if link else "")
        fig.suptitle(f"fused op vs unfused (MPI + one BLAS call), M x N x K; {where}", fontsize=10)
        fig.tight_layout()
        name = f"speedup_{hosts}h" + (f"_{link}" if link else "") + f".{fmt}"
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        written.append(name)
    return written


def plot_bandwidth(rows, torch_rows, out_dir, fmt):
    sel = [r for r in rows if r["op"] in COLLECTIVES and r.get("algbw_gbs") is not None]
    if not sel:
        return []
    ops = [op for op in COLLECTIVES if any(r["op"] == op for r in sel)]
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 4.0), squeeze=False)
    for ax, op in zip(axes[0], ops):
        by = collections.defaultdict(list)
        for r in sel:
            if r["op"] == op:
                by[(r.get("hosts", 1), r.get("world", 0))].append(r)
        for i, ((hosts, world), rs) in enumerate(sorted(by.items())):
            rs.sort(key=lambda r: r["bytes_per_rank"])
            x = [r["bytes_per_rank"] for r in rs]
            c = f"C{i}"
            where = f"{world} ranks, {hosts} host{'s' if hosts != 1 else ''}"
            ax.plot(x, [r["algbw_gbs"] for r in rs], "-o", color=c, ms=3,
                    label=f"fluxcpp ({where})")
            ax.plot(x, [r["algbw_unfused_gbs"] for r in rs], "--s", color=c, ms=3,
                    label=f"MPI ({where})")
            ts = sorted((r for r in torch_rows if r["op"] == op and r.get("world") == world
                         and "algbw_gloo_gbs" in r and hosts == 1),
                        key=lambda r: r["bytes_per_rank"])
            if ts:
                ax.plot([r["bytes_per_rank"] for r in ts], [r["algbw_gloo_gbs"] for r in ts],
                        ":^", color=c, ms=4, label=f"torch gloo ({world} ranks)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_title(op, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("algorithm bandwidth (GB/s, log)")
    fig.suptitle("collectives: fluxcpp vs MPI vs torch.distributed gloo (f32)", fontsize=10)
    fig.tight_layout()
    name = f"bandwidth.{fmt}"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return [name]


def plot_torch(rows, out_dir, fmt):
    if not rows:
        return []
    ops = sorted({r["op"] for r in rows})
    fig, axes = plt.subplots(1, len(ops), figsize=(3.0 * len(ops), 3.6), squeeze=False)
    for ax, op in zip(axes[0], ops):
        sel = [r for r in rows if r["op"] == op]
        vals = [r["speedup"] for r in sel]
        ax.bar(range(len(sel)), vals, color=["tab:blue" if v >= 1 else "tab:red" for v in vals])
        ax.axhline(1.0, color="black", lw=0.8)
        if max(vals) / min(vals) > 10:  # log only where the range needs it
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, max(vals) * 1.15)
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([r["shape"].replace(" ", "\n") for r in sel], fontsize=6)
        ax.set_title(op, fontsize=9)
        for i, r in enumerate(sel):
            ax.text(i, r["speedup"], f"{r['speedup']:.1f}x", ha="center", va="bottom", fontsize=6)
    axes[0][0].set_ylabel("speedup over torch + gloo")
    world = rows[0].get("world")
    fig.suptitle(f"fluxcpp (Python module) vs torch.distributed gloo + torch.mm, f32, {world} "
                 "ranks", fontsize=10)
    fig.tight_layout()
    name = f"vs_torch.{fmt}"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return [name]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench", nargs="*", help="fluxcpp_bench --json files")
    ap.add_argument("--torch", help="scripts/bench_torch.py --json file")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--format", default="png", choices=("png", "svg"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = [r for p in a.bench for r in load(p)]
    torch_rows = load(a.torch) if a.torch else []
    written = plot_speedup(rows, a.out, a.format) + plot_bandwidth(rows, torch_rows, a.out,
                                                                     a.format)
    written += plot_torch(torch_rows, a.out, a.format)
    for w in written:
        print(os.path.join(a.out, w))


if __name__ == "__main__":
    main()
