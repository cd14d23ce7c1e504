"""Python signatures in docs/python.md, docs/api.md and README.md against the package.

Backtick spans naming fluxcpp objects, against inspect.signature: `[fluxcpp.]Name(params)`,
`Name.method(params)`, class-table rows `Cls(ctx, ...)` with their forward column `(input [m, k],
bias=None, *, out)` or methods (`send`, `update(weight)`): names, order, keyword-only (after `*`),
defaults where stated (`dtype=…` states none). `…` alone: unlisted parameters (`f(a, …)`
checks a prefix, `f(a, …, z)` also a suffix); `input [m/W, k]` names `input`. Non-parameter lists
(`Context(MPI.COMM_SELF)`), chain receivers (`AgGemm(...).forward(...)`) and README's ```python
calls (and `op(x)` of the ops they make) must bind. `A` = `B`, `A (= B)`: one object. A documented
name that does not exist fails. Full rules in python.md's "API" / "Autograd" and api.md's "Python"
(bare `f(...)`: a fluxcpp function, or a method of the `- Class:` bullet's or table row's class);
elsewhere only `fluxcpp.` spans, signatures only with `*` or `…`. Every exported class needs its
constructor (an op also its forward) in docs/python.md. Needs torch and libfluxcpp; no MPI.
"""
import ast
import builtins
import inspect
import os
import re
import sys

import torch
import fluxcpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = {"docs/python.md": ("## API", "## Autograd"), "docs/api.md": ("## Python",),
        "README.md": ()}
GAP = "…"
FOREIGN = {"MPI", "MPI_Comm", "torch", "Tensor"}  # not fluxcpp's names
failures, counts, documented = [], {"signatures": 0, "calls": 0, "names": 0}, {}

def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)

def resolve(path, where, base=fluxcpp, base_name="fluxcpp"):
    obj = base
    for part in path.split("."):
        if not hasattr(obj, part):
            return fail(f"{path}: {where}: documented, but {base_name} has no {part}")
        obj = getattr(obj, part)
    counts["names"] += 1
    return obj

def params(obj):
    ps = list(inspect.signature(obj).parameters.values())
    return ps[1:] if ps and ps[0].name in ("self", "cls") else ps

def code_sig(obj):  # the signature without self
    return str(inspect.Signature(params(obj)))

def items(args):
    """[(name, keyword_only, default text or None) or GAP], or None when not a parameter list."""
    args = re.sub(r"\s*\[[^\]]*\]", "", args)  # shapes: `input [m/W, k]` names `input`
    out, kw = [], False
    for it in (a.strip() for a in args.split(",")):
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*(?:=\s*(.+))?", it)
        if it == "*":
            kw = True
        elif it == GAP:
            out.append(GAP)
        elif it and not m:
            return None
        elif it:
            out.append((m[1], kw, m[2]))
    return out

def same_default(text, value):
    try:
        doc = eval(text, {"torch": torch, "fluxcpp": fluxcpp})
    except Exception:
        return text == repr(value)
    return doc is value or (type(doc) is type(value) and doc == value)

def mismatch(doc, ps):
    """Why the documented items do not describe the parameters ps, or None."""
    segs, pos = [[]], 0
    for it in doc:
        segs.append([]) if it == GAP else segs[-1].append(it)
    for i, seg in [(i, seg) for i, seg in enumerate(segs) if seg]:
        names = [n for n, _, _ in seg]
        starts = ([0] if i == 0 else [len(ps) - len(seg)] if i == len(segs) - 1
                  else range(pos, len(ps) - len(seg) + 1))
        j = next((j for j in starts if j >= pos and
                  [p.name for p in ps[j:j + len(seg)]] == names), None)
        if j is None and len(starts) == 1 and starts[0] >= 0:  # anchored: the first difference
            code = [p.name for p in ps[starts[0]:]] + ["nothing"] * len(seg)
            k = next((k for k, n in enumerate(names) if code[k] != n), 0)
            return f"parameter {starts[0] + k + 1}: the doc has {names[k]}, the code {code[k]}"
        if j is None:
            return f"the doc's {', '.join(names)} do not follow, in this order, in the code"
        if len(segs) == 1 and len(seg) != len(ps):
            more = ", ".join(p.name for p in ps[len(seg):])
            return f"the code has more: {more} (and the doc no …)"
        for (name, kw, default), p in zip(seg, ps[j:j + len(seg)]):
            if kw != (p.kind == p.KEYWORD_ONLY):
                return f"{name} is {'' if kw else 'not '}keyword-only in the doc"
            if default not in (None, GAP):
                if p.default is p.empty:
                    return f"{name} has no default in the code"
                if not same_default(default, p.default):
                    return f"{name} defaults to {p.default!r} in the code"
        pos = j + len(seg)
    return None

def check_sig(obj, name, text, where):
    """text: the documented parameter list, without its parentheses."""
    counts["signatures"] += 1
    why = mismatch(items(text), params(obj))
    if why:
        fail(f"{name}: {where}: documented {name}({text}), code {name}{code_sig(obj)}: {why}")

def check_call(obj, name, call, where, text):
    counts["calls"] += 1
    try:
        call = ast.parse(f"f({call})", mode="eval").body if isinstance(call, str) else call
        if any(isinstance(a, ast.Starred) for a in call.args) or \
                any(k.arg is None for k in call.keywords):
            return
        inspect.Signature(params(obj)).bind(*call.args, **{k.arg: 0 for k in call.keywords})
    except (TypeError, SyntaxError) as e:
        fail(f"{name}: {where}: the call {text} does not fit {name}{code_sig(obj)}: {e}")

def check_span(span, where, full, ctx=None, method=False):
    """One backtick span; ctx: the class whose methods bare lowercase names are."""
    s = " ".join(span.replace("...", GAP).split())
    if re.fullmatch(r"fluxcpp\.(h|hpp|pc|so[.\d]*)", s):  # file names
        return None
    m = re.fullmatch(r"(fluxcpp\.)?([A-Za-z_][\w.]*)(?:\(([^()]*)\)(?:\.(\w+)\(([^()]*)\))?)?"
                     r"\s*(?:(?:->|→).*)?", s)
    if not m:
        return None
    prefixed, path, args, meth, margs = m.groups()
    first = path.split(".")[0]
    if ctx is not None and (method or (args is not None and first[0].islower())) \
            and not hasattr(fluxcpp, first):
        base, base_name = ctx, ctx.__name__
    elif prefixed or (full and (first[0].isupper() or hasattr(fluxcpp, first))
                      and first not in FOREIGN and not hasattr(builtins, first)
                      and not re.fullmatch(r"[A-Z][A-Z0-9_]*", first)):  # an env variable
        base, base_name = fluxcpp, "fluxcpp"
    else:
        return None
    obj = resolve(path, where, base, base_name)
    if obj is None or args is None:
        return obj
    label = path if base is fluxcpp else f"{base_name}.{path}"
    doc = items(args)
    if meth is None and doc is not None and (full or "*" in args or GAP in args):
        documented[obj] = documented.get(obj) or where.startswith("docs/python.md")
        check_sig(obj, label, args, where)
        return obj
    check_call(obj, label, args, where, s)
    if meth is not None:
        mobj = resolve(meth, where, obj, path)
        if mobj is not None and items(margs) is not None:
            check_sig(mobj, f"{path}.{meth}", margs, where)
    return obj

def check_aliases(text, where):
    for a, b in re.findall(r"`(?:fluxcpp\.)?(\w+)`\s*=\s*`(?:fluxcpp\.)?(\w+)", text) + \
            re.findall(r"\b([A-Z]\w+) \(= ([A-Z]\w+)\)", text):
        oa, ob = resolve(a, where), resolve(b, where)
        if oa is not None and ob is not None and oa is not ob:
            fail(f"{a}: {where}: documented as an alias of {b}, but they are different objects")
    for names in re.findall(r"names as aliases\s*\(([^)]*)\)", text):
        for a in re.findall(r"`(\w+)`", names):
            o = resolve(a, where)
            if o is not None and [n for n in fluxcpp.__all__ if getattr(fluxcpp, n) is o] == [a]:
                fail(f"{a}: {where}: documented as an alias, but no other exported name is {a}")

def check_lists(text, rel, start):
    """Prose lists, every name must exist: "`input_buffer()` on A, B and C" (with the method),
    "where FLUX has one: A, B (= C), …;", "functions `a` and `b`"."""
    for m in re.finditer(r"`(\w+)\(\)` on ((?:[A-Z]\w+(?:,\s*|\s+and\s+))*[A-Z]\w+)|where FLUX "
                         r"has one:([^;]*);|[Ff]unctions\s+(`?\w+`?\s+and\s+`?\w+`?)", text):
        where = f"{rel}:{start + text.count(chr(10), 0, m.start())}"
        for name in re.findall(r"\b(?!and\b)\w+", m[2] or m[3] or m[4]):
            cls = resolve(name, where)
            if m[1] and cls is not None:
                resolve(m[1], where, cls, name)

def check_row(cells, where, full):
    cls = None
    for span in re.findall(r"`([^`]+)`", cells[0]):
        obj = check_span(span, where, full)
        cls = obj if "(" in span else cls
    check_aliases(cells[0], where)
    rest = "|".join(cells[1:]) if cls is None or len(cells) < 3 else cells[2]
    m = re.match(r"\s*`\(([^`]*)\)`", rest) if cls is not None else None
    if m and items(m[1]) is not None and resolve("forward", where, cls, cls.__name__):
        documented[cls.forward] = True
        check_sig(cls.forward, f"{cls.__name__}.forward", m[1], where)
    elif cls is not None:  # a method list: `send`, `isend`, `update(weight)`
        m = re.match(r"\s*(`[^`]+`(?:\s*,\s*`[^`]+`)*)", rest)
        for span in re.findall(r"`([^`]+)`", m[1] if m else ""):
            check_span(span, where, full, cls, method=True)
    for span in re.findall(r"`([^`]+)`", rest[m.end():] if m else rest):
        check_span(span, where, full)

def check_doc(rel, sections):
    lines = open(os.path.join(ROOT, rel), encoding="utf-8").read().split("\n")
    blocks, cur, fence, full = [], None, None, False
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if s.startswith("```"):
            if fence and rel == "README.md":
                check_code(rel, *fence)
            fence, cur = (None if fence else (i, s[3:].strip(), [])), None
            continue
        if fence:
            fence[2].append(line)
            continue
        if s.startswith("## "):
            full = s.startswith(sections) if sections else False
        if not s or s.startswith(("- ", "|", "#")) or cur is None:
            cur = [i, full, []]
            blocks.append(cur)
        if s:
            cur[2].append(line)
    for start, full, block in blocks:
        text, where = "\n".join(block), f"{rel}:{start}"
        if text.startswith("|"):
            check_row([c for c in text.strip().strip("|").split("|")], where, full)
            continue
        check_aliases(text, where)
        if full:
            check_lists(text, rel, start)
        m = re.match(r"- (\w+):", text)
        ctx = getattr(fluxcpp, m[1], None) if m and full else None
        for sm in re.finditer(r"`([^`]+)`", text):
            check_span(sm[1], f"{rel}:{start + text.count(chr(10), 0, sm.start())}", full, ctx)

def check_code(rel, start, lang, lines):
    if lang != "python":
        return
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as e:
        return fail(f"{rel}:{start}: the python block does not parse: {e}")
    ops = {}  # names bound to fluxcpp objects: `with fluxcpp.X(...) as op`, `op = fluxcpp.X(...)`
    for node in ast.walk(tree):
        for value, var in [(w.context_expr, w.optional_vars) for w in getattr(node, "items", [])] \
                + ([(node.value, node.targets[0])] if isinstance(node, ast.Assign) else []):
            if isinstance(var, ast.Name) and isinstance(value, ast.Call):
                ops[var.id] = ast.unparse(value.func)
    for node in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        where, func = f"{rel}:{start + node.lineno}", ast.unparse(node.func)
        name = func if func.startswith("fluxcpp.") else ops.get(func, "")
        obj = resolve(name[len("fluxcpp."):], where) if name.startswith("fluxcpp.") else None
        if obj is not None and name != func:  # `op(x)` of an op the block made: its forward
            name, obj = f"{getattr(obj, '__name__', name)}.forward", getattr(obj, "forward", None)
        if obj is not None:
            check_call(obj, name, node, where, ast.unparse(node))

for rel, sections in DOCS.items():
    check_doc(rel, sections)
for name in fluxcpp.__all__:
    obj = getattr(fluxcpp, name)
    if not isinstance(obj, type) or issubclass(obj, (BaseException, int, tuple)):
        continue
    op = hasattr(obj, "forward") and not issubclass(obj, torch.nn.Module)  # layers: prose
    for what, o in [("constructor", obj)] + [("forward", getattr(obj, "forward", None))] * op:
        if not documented.get(o):
            fail(f"{name}: its {what} {code_sig(o)} has no signature in docs/python.md")
if "mpi4py" in sys.modules:
    fail("importing fluxcpp or checking the docs imported mpi4py")
print(f"checked {counts['signatures']} signatures, {counts['calls']} calls, "
      f"{counts['names']} names in {', '.join(DOCS)}")
if failures:
    print(f"{len(failures)} mismatch(es) between the docs and the package", file=sys.stderr)
    sys.exit(1)
print("OK")
