"""docs/history/benchmarks-lab-notes.md's table of the TCP channel against the MPI channel, from the JSON that
scripts/bench_channels.sh --json DIR writes (one DIR per round; medians over rounds).

    python3 scripts/channels_table.py DIR [DIR ...]"""
import glob
import json
import os
import statistics
import sys


def rows(d, channel):
    out = {}
    for path in glob.glob(os.path.join(d, f"{channel}-*.json")):
        for line in open(path):
            r = json.loads(line)
            if r["op"] == "link_probe":
                key = ("link_probe", r["variant"])
            else:
                key = (r["op"], r["m"], r["n"], r["k"], r["dtype"],
                       "zero-copy" if r.get("zero_copy") else "packed" if r.get("packed")
                       else "copied")
            out[key] = r
    return out


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def main(dirs):
    runs = [(rows(d, "mpi"), rows(d, "gloo")) for d in dirs]
    keys = sorted({k for m, g in runs for k in m if k in g}, key=str)
    probe = {v: (med([m[("link_probe", v)]["hidden"] for m, _ in runs if ("link_probe", v) in m]),
                 med([g[("link_probe", v)]["hidden"] for _, g in runs if ("link_probe", v) in g]))
             for v in ("thread", "inline")}
    print(f"Link probe, hidden share (MPI run / TCP run): thread {probe['thread'][0]:.2f} / "
          f"{probe['thread'][1]:.2f}, inline {probe['inline'][0]:.2f} / {probe['inline'][1]:.2f}"
          "\n")
    print("| op | m | n | k | dtype | input | fused, MPI (ms) | fused, TCP (ms) | TCP speed "
          "÷ MPI | unfused (ms) | comm-only MPI / TCP (ms) | hidden MPI / TCP |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for k in keys:
        if k[0] == "link_probe":
            continue
        fm = med([m[k]["t_fused_ms"] for m, _ in runs if k in m])
        fg = med([g[k]["t_fused_ms"] for _, g in runs if k in g])
        un = med([m[k]["t_unfused_ms"] for m, _ in runs if k in m] +
                 [g[k]["t_unfused_ms"] for _, g in runs if k in g])
        cm = med([m[k].get("t_comm_only_ms") for m, _ in runs if k in m])
        cg = med([g[k].get("t_comm_only_ms") for _, g in runs if k in g])
        hm = med([m[k].get("hidden") for m, _ in runs if k in m])
        hg = med([g[k].get("hidden") for _, g in runs if k in g])
        comm = f"{cm:.2f} / {cg:.2f}" if cm is not None and cg is not None else "–"
        hid = f"{hm:.2f} / {hg:.2f}" if hm is not None and hg is not None else "–"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {k[5]} | {fm:.3f} | {fg:.3f} | "
              f"**{fm / fg:.2f}x** | {un:.3f} | {comm} | {hid} |")


if __name__ == "__main__":
    main(sys.argv[1:])
