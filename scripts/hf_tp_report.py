"""scripts/bench_hf_tp.py's table: TTFT and time per output token of each configuration, ratios
against gloo (and DeepSpeed AutoTP with --autotp), every configuration's greedy tokens checked
against one process's."""
import json
import os
import statistics

CONFIGS = ("gloo", "autotp", "autotp_fluxcpp", "autotp_fused", "fluxcpp", "fused", "one")
LABELS = {"gloo": "HF tp_plan, gloo", "fluxcpp": 'HF tp_plan, "fluxcpp" backend',
          "fused": "fluxcpp fused layers", "one": "one process (reference)",
          "autotp": "DeepSpeed AutoTP (SHM all-reduce)",
          "autotp_fluxcpp": 'AutoTP split, "fluxcpp" backend',
          "autotp_fused": "AutoTP split, fluxcpp fused layers"}


def summarize(rounds, cfg):
    """(TTFT ms, per-token ms) of a configuration: medians over the rounds of each run's medians."""
    med = statistics.median
    vals = [(med(r[cfg]["ttft_s"]) * 1e3, med(r[cfg]["steps_s"]) * 1e3) for r in rounds
            if "ttft_s" in r.get(cfg, {})]
    return (med(v[0] for v in vals), med(v[1] for v in vals)) if vals else None


def ratio(rounds, cfg, key, base="gloo"):
    """median over the rounds of base's time / cfg's time (> 1: faster than base)."""
    med = statistics.median
    xs = [med(r[base][key]) / med(r[cfg][key]) for r in rounds
          if key in r.get(cfg, {}) and key in r.get(base, {})]
    return med(xs) if xs else None


def report(args, info, results, ratios_ok):
    failures, peer_diffs = [], []
    print(f"\nTTFT: prefill of {args.prompt_len} tokens to the first token; per token: a decode "
          f"step at batch 1 (median); ms, the slowest rank's. Ratios: gloo's time / this one's "
          f"(> 1: faster than gloo)" + (", then AutoTP's / this one's" if args.autotp else "")
          + ".\n")
    bases = ("gloo", "autotp") if args.autotp else ("gloo",)
    print("| dtype | configuration | W | TTFT ms | per token ms | " + " | ".join(
        f"TTFT vs {b} | per token vs {b}" for b in bases) + " |")
    print("|---" * (5 + 2 * len(bases)) + "|")
    rows = []
    for dtype, rounds in results.items():
        for cfg in CONFIGS:
            s = summarize(rounds, cfg)
            if s is None:
                errs = sorted({r[cfg]["error"] for r in rounds if "error" in r.get(cfg, {})})
                if errs:
                    print(f"| {dtype} | {LABELS[cfg]} | {args.world} | error: "
                          f"{'; '.join(errs)[:300]} |" + " |" * (1 + 2 * len(bases)))
                    rows.append({"dtype": dtype, "config": cfg, "error": errs})
                if not (cfg.endswith("fused") and args.no_fused) and not (
                        cfg.startswith("autotp") and not args.autotp):
                    failures.append(f"{dtype} {cfg}: no result")
                continue
            w = 1 if cfg == "one" else args.world
            rt = [ratio(rounds, cfg, k, b) if ratios_ok else None for b in bases
                  for k in ("ttft_s", "steps_s")]
            cells = [f"{x:.2f}x" if x is not None else ("–" if ratios_ok else "(busy)")
                     for x in rt]
            print(f"| {dtype} | {LABELS[cfg]} | {w} | {s[0]:.1f} | {s[1]:.2f} | "
                  + " | ".join(cells) + " |")
            rows.append({"dtype": dtype, "config": cfg, "world": w, "ttft_ms": s[0],
                         "tpot_ms": s[1], "ttft_vs_gloo": rt[0], "tpot_vs_gloo": rt[1],
                         "ttft_vs_autotp": rt[2] if args.autotp else None,
                         "tpot_vs_autotp": rt[3] if args.autotp else None,
                         "runs": [r[cfg] for r in rounds if "ttft_s" in r.get(cfg, {})]})
    swapped = {r[c].get("layers_swapped") for rs in results.values() for r in rs
               for c in ("fused", "autotp_fused") if c in r}
    print(f"\nfused: {'/'.join(map(str, swapped)) or 'no'} linear layers swapped per rank. "
          "Greedy tokens (rank 0's; every rank's checked):")
    ds = {", ".join(r["autotp"].get("deepspeed_layers", [])) for rs in results.values()
          for r in rs if "ttft_s" in r.get("autotp", {})}
    if ds:
        print(f"autotp: DeepSpeed's layers in the model: {' / '.join(ds) or 'none'}")
    for dtype, rounds in results.items():
        for i, r in enumerate(rounds):
            ref = r.get("one", {}).get("tokens")
            for cfg in CONFIGS:
                if "tokens" not in r.get(cfg, {}):
                    continue
                toks, mark = r[cfg]["tokens"], ""
                if cfg != "one":
                    if ref is None:
                        mark = "  (no reference)"
                    elif toks != ref:
                        first = next(j for j, (a, b) in enumerate(zip(toks, ref)) if a != b)
                        mark = f"  <<< MISMATCH with one process's from token {first}"
                        what = (f"{dtype} round {i + 1} {cfg}: tokens differ from one "
                                f"process's from token {first}")
                        # A peer's numerics are reported, not this script's failure: AutoTP's
                        # lm_head splits the hidden dimension and all-reduces the partial logits
                        # in the model's dtype (bf16: rounded per rank before the sum); every
                        # autotp* configuration keeps that head.
                        (peer_diffs if cfg.startswith("autotp") else failures).append(what)
                    if cfg.endswith("fused") and not r[cfg].get("layers_swapped"):
                        mark += "  <<< NO LAYER SWAPPED"
                        failures.append(f"{dtype} round {i + 1} {cfg}: no layer was swapped")
                    if not r[cfg]["ranks_agree"]:
                        mark += "  <<< RANKS DISAGREE"
                        failures.append(f"{dtype} round {i + 1} {cfg}: the ranks' tokens differ")
                print(f"  {dtype} round {i + 1} {cfg:14s} {toks}{mark}")
    if not ratios_ok:
        print(f"\nWARNING: load average at start {info['load_avg_start'][0]:.2f} > "
              f"{args.max_load}: ratios not reported; rerun on a quiet machine.")
    print("load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": {k: v for k, v in vars(args).items()
                                                 if v is not None and k not in ("worker", "out")},
                       "load_avg_end": os.getloadavg(), "ratios_reported": ratios_ok,
                       "rows": rows, "failures": failures, "peer_diffs": peer_diffs}, f,
                      indent=1)
        print(f"results in {args.json}")
    for d in peer_diffs:
        print(f"(peer) {d}: the peer's own rounding, not a failure of this run")
    for fl in failures:
        print(f"!!! FAIL: {fl}")
    print(("tokens: all equal to one process's" + (" but the peer's above" if peer_diffs else ""))
          if not failures else
          f"!!! {len(failures)} FAILURE(S): see above")
    return 1 if failures else 0
