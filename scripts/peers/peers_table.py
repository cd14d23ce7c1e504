"""The markdown of scripts/bench_peers.py's results: a header (revision, machine, versions, load),
the peers that could not run with their exact errors, one table per W, dtype and op (each peer's
µs, fluxcpp's speedup over the fastest peer: its time ÷ fluxcpp's), and the large all-reduces against the copy bound."""

LABELS = {"fluxcpp": '"fluxcpp" backend', "fluxcpp_module": "fluxcpp module",
          "deepspeed_shm": "DeepSpeed SHM", "oneccl": "oneCCL", "gloo": "gloo"}
OURS = ("fluxcpp", "fluxcpp_module")
OPS = ("all_reduce", "all_gather", "reduce_scatter")
QUIET_LOAD = 1.0  # a 1-minute load average above this at the start: other jobs were running


def size(b):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n:
            return f"{b / n:g} {unit}"
    return f"{b} B"


def us(t):
    return f"{t:.1f}" if t < 1000 else f"{t:.0f}"


def speedup(theirs, ours):
    """The fastest peer's time over fluxcpp's, bold where fluxcpp is ahead."""
    x = theirs / ours
    return f"**{x:.2f}x**" if x >= 1 else f"{x:.2f}x"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def render(meta, rows):
    load = float(meta["load_start"].split()[0])
    quiet = load <= QUIET_LOAD
    parts = [f"Measured by `scripts/bench_peers.sh` at rev **{meta['rev']}** on {meta['date']}: "
             f"{meta['machine']}; {meta['versions']}. Load average {meta['load_start']} at the "
             f"start, {meta.get('load_end', '?')} at the end."
             + ("" if quiet else f" **Not a quiet machine** (1-minute load {load:.2f} > "
                f"{QUIET_LOAD:g} at the start: other jobs shared the cores): these figures show "
                "that every peer runs and agrees, not how fast each is.")]
    notes = []

    def note(text):
        if text not in notes:
            notes.append(text)
        return f"err [{notes.index(text) + 1}]"
    whole = [r for r in rows if "error" in r and "op" not in r]
    worlds = sorted({r["world"] for r in rows if "world" in r})
    over = sorted({r["world"] for r in rows if r.get("oversubscribed")})
    if over:
        parts.append(f"W = {', '.join(map(str, over))}: **oversubscribed** (more ranks than the "
                     f"{meta.get('cores', '?')} cores): every peer's waiting competes with the "
                     "ranks it waits for.")
    # The copy bound per world size and dtype (timed beside the all-reduces; stored runs measured
    # it per world size only, and those that measured one process have no world: 0, for every W).
    bounds = {(r.get("world", 0), r.get("dtype"), r["bytes"]): r["us"]
              for r in rows if r.get("peer") == "copy"}
    timed = [r for r in rows if "op" in r and r.get("peer") in LABELS]
    big = []
    for w in worlds:
        down = {r["peer"]: r["error"] for r in whole if r["world"] == w}
        for dt in ("f32", "bf16"):
            for op in OPS:
                sel = [r for r in timed if r["world"] == w and r["dtype"] == dt and r["op"] == op]
                if not sel:
                    continue
                peers = [p for p in LABELS if any(r["peer"] == p for r in sel) or p in down]
                lines = []
                for b in sorted({r["bytes"] for r in sel}):
                    cells, best = [], {}
                    for p in peers:
                        r = next((x for x in sel if x["peer"] == p and x["bytes"] == b), None)
                        if r is None:
                            cells.append(note(f"{LABELS[p]}, W={w}: {down[p]}") if p in down
                                         else "–")
                        elif r.get("error"):
                            cells.append(note(f"{LABELS[p]} {op} {dt}: {r['error']}"))
                        elif not r["ok"]:
                            cells.append(f"WRONG ({r['wrong']})")
                        else:
                            cells.append(us(r["us"]))
                            best[p] = r["us"]
                    theirs = {p: t for p, t in best.items() if p not in OURS}
                    if theirs and any(p in best for p in OURS):
                        fast = min(theirs, key=theirs.get)
                        # fluxcpp's speedup over the fastest peer (> 1: fluxcpp ahead)
                        ratio = " / ".join(speedup(theirs[fast], best[p]) if p in best else "–"
                                           for p in OURS)
                        lines.append([size(b)] + cells + [LABELS[fast], ratio])
                    else:
                        lines.append([size(b)] + cells + ["–", "–"])
                    bound = bounds.get((w, dt, b), bounds.get((w, None, b),
                                                              bounds.get((0, None, b))))
                    if op == "all_reduce" and bound is not None:
                        big.append((w, dt, b, bound, best))
                parts.append(f"**W = {w}, {dt}, {op}** (µs per call)")
                parts.append(table(["bytes"] + [LABELS[p] for p in peers]
                                   + ["fastest peer", "fluxcpp's speedup over it (backend / module)"],
                                   lines))
    if big:
        peers = [p for p in LABELS if any(p in x[4] for x in big)]
        how = ("on one core (`torch` copy, median of 5)" if any(k[0] == 0 for k in bounds) else
               "by every rank at once, timed like the peers (`torch` copy, the slowest rank, "
               "batches of at least 4 ms, median of the rounds)"
               if any(k[1] is not None for k in bounds) else
               "while W processes placed as the ranks copy theirs at once (`torch` copy, the "
               "slowest of each round, median of 5 rounds)")
        parts.append("**Large all-reduces against the copy bound**: bound = 2 x one memcpy of the "
                     f"same bytes {how}; each cell is bound ÷ time (1.00: at the bound).")
        parts.append(table(["W", "dtype", "bytes", "bound µs"] + [LABELS[p] for p in peers],
                           [[w, dt, size(b), us(2 * t)]
                            + [f"{2 * t / best[p]:.2f}" if p in best else "–" for p in peers]
                            for w, dt, b, t, best in big]))
    if notes:
        parts.append("Errors, exactly as the peers gave them:\n\n"
                     + "\n".join(f"{i + 1}. {n}" for i, n in enumerate(notes)))
    for r in whole:
        if not any(r["error"] in n for n in notes):
            parts.append(f"- {r['peer']}, W={r['world']}: {r['error']}")
    return "\n\n".join(parts) + "\n"
