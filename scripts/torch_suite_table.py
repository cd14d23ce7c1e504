"""Tabulates scripts/torch_suite.sh's logs (<backend>-w<W>.log in the given directory): each
test's outcome per backend and world size, the counts, and every test that passes on gloo but not
on fluxcpp (which docs/testing.md must list with its reason).

    python3 scripts/torch_suite_table.py DIR"""
import collections
import os
import re
import sys

# "test_x (__main__.TestDistBackendWithSpawn.test_x) ... ok" with rank logs interleaved: the
# outcome is the first of ok / skipped / FAIL / ERROR / expected failure after the test's name.
_START = re.compile(r"^(test_\w+) \(__main__\.\w+(?:\.\w+)?\) \.\.\. ")
_OUTCOME = re.compile(r"(?:^|\.\.\. |\s)(ok|skipped|FAIL|ERROR|expected failure)\b")


def outcomes(path):
    result, current = {}, None
    with open(path, errors="replace") as f:
        for line in f:
            m = _START.match(line)
            if m:
                current = m.group(1)
                line = line[m.end():]
            if current is None or line.startswith("INFO:"):
                continue
            o = _OUTCOME.search(line if m else line.strip() and " " + line.strip())
            if o and (m or line.strip().split()[0] in ("ok", "skipped", "FAIL", "ERROR")):
                result[current] = {"expected failure": "xfail"}.get(o.group(1), o.group(1))
                current = None
    return result


def main(d):
    runs = {}
    for name in sorted(os.listdir(d)):
        m = re.match(r"(\w+)-w(\d+)\.log$", name)
        if m:
            runs[(m.group(1), int(m.group(2)))] = outcomes(os.path.join(d, name))
    sizes = sorted({w for _, w in runs})
    print("| W | backend | tests | ok | skipped | FAIL | ERROR |")
    print("|---|---|---|---|---|---|---|")
    for w in sizes:
        for b in ("gloo", "fluxcpp", "fluxcpp_as_gloo"):
            if (b, w) not in runs:
                continue
            c = collections.Counter(runs[(b, w)].values())
            print(f"| {w} | {b} | {len(runs[(b, w)])} | {c['ok']} | {c['skipped']} | "
                  f"{c['FAIL']} | {c['ERROR']} |")
    for w in sizes:
        g, f = runs.get(("gloo", w)), runs.get(("fluxcpp", w))
        if g is None or f is None:
            continue
        a = runs.get(("fluxcpp_as_gloo", w), {})
        worse = sorted(t for t, o in g.items() if o == "ok" and f.get(t) != "ok")
        print(f"\nW = {w}: passes on gloo, not on fluxcpp ({len(worse)}; then run on fluxcpp "
              "as the suite runs them for gloo):")
        for t in worse:
            print(f"- {t}: {f.get(t, 'not run')}; as gloo: {a.get(t, 'not run')}")
        better = sorted(t for t, o in f.items() if o == "ok" and g.get(t) != "ok")
        print(f"\nW = {w}: passes on fluxcpp, not on gloo ({len(better)}):")
        for t in better:
            print(f"- {t}: gloo {g.get(t, 'not run')}")


if __name__ == "__main__":
    main(sys.argv[1])
