"""The ctypes signatures in python/fluxcpp/_lib.py against include/fluxcpp/fluxcpp.h.

Parses every FLUXCPP_API declaration of the header (and its typedefs), maps each C type to the
ctypes types that pass it correctly, and fails, naming the function and the argument, when:
- _lib.py declares a function the header lacks, with another argument count, or with an
  argument or return type of another kind or size (e.g. c_int for int64_t);
- a header function has no signature in _lib.py (the package covers the whole C ABI:
  docs/python.md, "every op of the C ABI");
- a literal name that the package's modules pass to _lib.fn() has no signature;
- fluxcpp.Status, _lib._ConfigStruct or _checks.DTYPES differ from fluxcpp_status_t,
  fluxcpp_context_config_t or fluxcpp_dtype_t.
Needs only the source tree: no libfluxcpp, MPI or torch. Run: python3 test_signatures.py.
"""
import ast
import ctypes
import importlib.util
import os
import re
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "fluxcpp", "fluxcpp.h")
# The C ABI is fluxcpp.h and the header of its MPI entry points, which fluxcpp.h includes.
HEADERS = [HEADER, os.path.join(ROOT, "include", "fluxcpp", "fluxcpp_mpi.h")]
PACKAGE = os.path.join(ROOT, "python", "fluxcpp")

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)


# ---- the header -------------------------------------------------------------------------------

def _strip(text):
    """The header without comments and preprocessor lines (continued lines included)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = text.replace("\\\n", " ")
    return "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))


_QUALIFIERS = {"const", "volatile", "restrict", "struct", "enum"}
_TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned"}


class CType:
    """A C type: its base (the words without qualifiers) and its level of indirection."""

    def __init__(self, text):
        self.text = " ".join(text.replace("*", " * ").split()).replace(" *", "*")
        tokens = re.findall(r"[A-Za-z_]\w*|\*", text)
        self.pointers = tokens.count("*")
        self.base = " ".join(t for t in tokens if t != "*" and t not in _QUALIFIERS)

    def __str__(self):
        return self.text


def _split_decl(text, typedefs):
    """'const int64_t* splits' -> (CType, 'splits'); a nameless parameter gets name None."""
    tokens = re.findall(r"[A-Za-z_]\w*|\*", text)
    if (len(tokens) >= 2 and re.match(r"[A-Za-z_]", tokens[-1])
            and tokens[-1] not in _TYPE_WORDS | _QUALIFIERS and tokens[-1] not in typedefs
            and any(t not in _QUALIFIERS for t in tokens[:-1])):
        name = tokens[-1]
        return CType(text[:text.rindex(name)]), name
    return CType(text), None


def parse_header(paths):
    """(functions, typedefs) of the headers `paths`, read as one: functions name -> (return
    CType, [(CType, param name)]); typedefs name -> ("enum", {enumerator: value}) | ("struct",
    [(CType, field)]) | ("alias", CType) (a handle is an alias of a struct pointer)."""
    path = " + ".join(os.path.basename(p) for p in paths)
    text = "\n".join(_strip(open(p, encoding="utf-8").read()) for p in paths)
    typedefs = {}
    for m in re.finditer(r"\btypedef\b([^;{]*)(\{[^}]*\})?([^;]*);", text):
        head, body, tail = m.group(1), m.group(2), m.group(3)
        name = re.findall(r"[A-Za-z_]\w*", tail or head)[-1]
        words = head.split()
        if body is not None and words and words[0] == "enum":
            values, nxt = {}, 0
            for item in body.strip("{}").split(","):
                if not item.strip():
                    continue
                key, _, val = item.partition("=")
                try:
                    nxt = int(val.strip(), 0) if val.strip() else nxt
                except ValueError:
                    fail(f"{path}: {name}: enumerator {key.strip()} = {val.strip()} is not a "
                         "plain integer (this parser reads no expressions)")
                values[key.strip()] = nxt
                nxt += 1
            typedefs[name] = ("enum", values)
        elif body is not None and words and words[0] == "struct":
            fields = [_split_decl(f, typedefs) for f in body.strip("{}").split(";") if f.strip()]
            typedefs[name] = ("struct", fields)
        else:
            typedefs[name] = ("alias", CType((head + tail)[:(head + tail).rindex(name)]))

    functions = {}
    decls = list(re.finditer(r"\bFLUXCPP_API\b([^;(]*)\(([^()]*)\)\s*;", text))
    if len(decls) != len(re.findall(r"\bFLUXCPP_API\b", text)):
        fail(f"{path}: only {len(decls)} of the {len(re.findall(r'FLUXCPP_API', text))} "
             "FLUXCPP_API declarations parsed (a parameter this parser does not know, such as a "
             "function pointer?)")
    for m in decls:
        ret, name = _split_decl(m.group(1), typedefs)
        if name in functions:
            fail(f"{path}: {name} is declared twice")
        params = [p.strip() for p in m.group(2).split(",")]
        if params == ["void"] or params == [""]:
            params = []
        functions[name] = (ret, [_split_decl(p, typedefs) for p in params])
    return functions, typedefs


# ---- C types to ctypes ------------------------------------------------------------------------

_SIGNED, _UNSIGNED, _FLOAT = "signed integer", "unsigned integer", "float"
_POINTER, _STRING = "pointer", "char pointer"
_BUILTIN = {  # C base type -> the ctypes type that passes it (by name)
    "int": "c_int", "unsigned": "c_uint", "unsigned int": "c_uint", "long": "c_long",
    "unsigned long": "c_ulong", "char": "c_char", "int8_t": "c_int8", "int16_t": "c_int16",
    "int32_t": "c_int32", "int64_t": "c_int64", "uint8_t": "c_uint8", "uint16_t": "c_uint16",
    "uint32_t": "c_uint32", "uint64_t": "c_uint64", "size_t": "c_size_t", "float": "c_float",
    "double": "c_double",
}


def kind(t):
    """(what it is, its size) for a ctypes type, None (void / set at the call) as is."""
    if t is None:
        return None
    code = getattr(t, "_type_", None)
    if isinstance(code, str):
        if code in "bhilqBHILQ" and len(code) == 1:
            return (_SIGNED if code.islower() else _UNSIGNED, ctypes.sizeof(t))
        if code in ("f", "d", "g"):
            return (_FLOAT, ctypes.sizeof(t))
        if code == "z":
            return (_STRING, ctypes.sizeof(t))
        if code == "P":
            return (_POINTER, ctypes.sizeof(t))
        if code == "c":
            return (_SIGNED, 1)
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return (_POINTER, ctypes.sizeof(t))
    return (t.__name__, ctypes.sizeof(t))


def describe(t):
    """'c_long (8-byte signed integer)'; a string names a ctypes attribute (c_int64, whose class
    is c_long here)."""
    if t is None:
        return "None"
    name, t = (t, getattr(ctypes, t)) if isinstance(t, str) else (t.__name__, t)
    k = kind(t)
    return f"{name} ({k[1]}-byte {k[0]})"


def expected(ctype, typedefs, where):
    """The ctypes types that pass `ctype` (names in ctypes, the preferred first), or ["MPI_Comm"]
    (an opaque MPI type whose ctypes type the caller sets: declared None); None if unknown."""
    base, ptrs = ctype.base, ctype.pointers
    seen = set()
    while ptrs == 0 and base in typedefs and typedefs[base][0] == "alias" and base not in seen:
        seen.add(base)
        alias = typedefs[base][1]
        base, ptrs = alias.base, alias.pointers
    if ptrs:
        return ["c_char_p", "c_void_p"] if base == "char" and ptrs == 1 else ["c_void_p"]
    if base == "void":
        return [None]
    if base in _BUILTIN:
        return [_BUILTIN[base]]
    if base in typedefs:
        what = typedefs[base][0]
        if what == "enum":
            return ["c_int"]
        fail(f"{where}: {base} is a {what} passed by value; this test does not map it")
        return None
    if base.startswith("MPI_"):
        return ["MPI_Comm"]
    fail(f"{where}: no ctypes mapping for the C type '{ctype}' (add it to {__file__})")
    return None


def compatible(got, want):
    if want is None:
        return True  # unknown type, already reported
    if want == ["MPI_Comm"]:
        return got is None
    if got is None or want == [None]:
        return got is None and want == [None]
    return any(kind(got) == kind(getattr(ctypes, w)) for w in want)


def want_text(want):
    if want == ["MPI_Comm"]:
        return "None (an MPI handle: the caller passes its ctypes type to fn())"
    return " or ".join(describe(w) for w in want)


# ---- the Python side --------------------------------------------------------------------------

def load_lib():
    """python/fluxcpp/_lib.py as a module, without the package's __init__ (which imports torch)
    and without libfluxcpp: the module loads the library at import, which a signature check
    does not need, so ctypes.CDLL stands aside while it runs."""
    pkg = types.ModuleType("fluxcpp")
    pkg.__path__ = [PACKAGE]
    config = types.ModuleType("fluxcpp._config")
    config.LIBRARY = None
    saved = {k: sys.modules.get(k) for k in ("fluxcpp", "fluxcpp._config", "fluxcpp._lib")}
    sys.modules.update({"fluxcpp": pkg, "fluxcpp._config": config})
    spec = importlib.util.spec_from_file_location("fluxcpp._lib", os.path.join(PACKAGE, "_lib.py"))
    module = importlib.util.module_from_spec(spec)
    real_cdll, real_env = ctypes.CDLL, os.environ.get("FLUXCPP_LIBRARY")
    ctypes.CDLL = lambda *args, **kw: types.SimpleNamespace()
    os.environ["FLUXCPP_LIBRARY"] = "(not loaded by test_signatures.py)"
    try:
        spec.loader.exec_module(module)
    finally:
        ctypes.CDLL = real_cdll
        if real_env is None:
            del os.environ["FLUXCPP_LIBRARY"]
        else:
            os.environ["FLUXCPP_LIBRARY"] = real_env
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


def names_called():
    """Literal C function names passed to fn() in the package: (file, line, name). Names built
    with f-strings (fluxcpp_{self._c}_create) are not resolved here."""
    out = []
    for fname in sorted(os.listdir(PACKAGE)):
        if not fname.endswith(".py"):
            continue
        path = os.path.join(PACKAGE, fname)
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", None)
            arg = node.args[0]
            if callee == "fn" and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append((fname, node.lineno, arg.value))
    return out


def dtype_codes():
    """_checks.DTYPES as {torch dtype name: code}, read from the source (importing it needs
    torch)."""
    path = os.path.join(PACKAGE, "_checks.py")
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DTYPES"
                                                for t in node.targets):
            return {k.attr: v.value for k, v in zip(node.value.keys, node.value.values)}
    fail(f"{path}: no DTYPES = {{torch.<dtype>: code, ...}} found")
    return {}


# ---- the checks -------------------------------------------------------------------------------

def check_functions(functions, typedefs, signatures):
    for name in sorted(signatures):
        argtypes, restype = signatures[name]
        if name not in functions:
            fail(f"{name}: declared in _lib.py, not in fluxcpp.h")
            continue
        ret, params = functions[name]
        want = expected(ret, typedefs, f"{name}: return type")
        if not compatible(restype, want):
            fail(f"{name}: returns {ret} in fluxcpp.h; _lib.py's restype is {describe(restype)}, "
                 f"needs {want_text(want)}")
        if len(argtypes) != len(params):
            c_args = ", ".join(f"{t} {p}" for t, p in params)
            fail(f"{name}: fluxcpp.h has {len(params)} argument(s) ({c_args}); _lib.py declares "
                 f"{len(argtypes)}")
        for i, ((ctype, pname), got) in enumerate(zip(params, argtypes)):
            where = f"{name}: argument {i} ({ctype} {pname or '(unnamed)'})"
            want = expected(ctype, typedefs, where)
            if not compatible(got, want):
                fail(f"{where}: _lib.py declares {describe(got)}, needs {want_text(want)}")
    missing = sorted(set(functions) - set(signatures))
    for name in missing:
        ret, params = functions[name]
        fail(f"{name}: in fluxcpp.h, no signature in _lib.py (the package covers the whole C "
             f"ABI: add it to _lib._OBJECTS or _lib._FUNCTIONS)")


def check_callers(signatures):
    for fname, line, name in names_called():
        if name not in signatures:
            fail(f"python/fluxcpp/{fname}:{line}: fn({name!r}) has no signature in _lib.py")


def typedef_body(typedefs, tag, name):
    """The members of fluxcpp.h's typedef `name` of an enum or a struct (`tag`); None, counted as
    a failure, if the header has no such typedef."""
    t = typedefs.get(name)
    if not t or t[0] != tag:
        fail(f"fluxcpp.h: no {tag} {name}")
        return None
    return t[1]


def check_status(lib, typedefs):
    members = typedef_body(typedefs, "enum", "fluxcpp_status_t")
    if members is None:
        return
    want = {re.sub(r"^FLUXCPP_(ERROR_)?", "", k): v for k, v in members.items()}
    got = {s.name: int(s) for s in lib.Status}
    for k in sorted(set(want) | set(got)):
        if want.get(k) != got.get(k):
            fail(f"Status.{k}: _lib.py has {got.get(k)}, fluxcpp_status_t has {want.get(k)}")


def check_config(lib, typedefs):
    fields = typedef_body(typedefs, "struct", "fluxcpp_context_config_t")
    if fields is None:
        return
    got = lib._ConfigStruct._fields_
    if [f for _, f in fields] != [f for f, _ in got]:
        fail(f"_ConfigStruct fields {[f for f, _ in got]} != fluxcpp_context_config_t's "
             f"{[f for _, f in fields]}")
    for (ctype, field), (pfield, ptype) in zip(fields, got):
        want = expected(ctype, typedefs, f"fluxcpp_context_config_t.{field}")
        if not compatible(ptype, want):
            fail(f"_ConfigStruct.{pfield} ({ctype} {field} in fluxcpp.h): {describe(ptype)}, "
                 f"needs {want_text(want)}")


def check_dtypes(typedefs):
    members = typedef_body(typedefs, "enum", "fluxcpp_dtype_t")
    if members is None:
        return
    want = {re.sub(r"^FLUXCPP_", "", k).lower(): v for k, v in members.items()}
    got = dtype_codes()
    for k in sorted(set(want) | set(got)):
        if want.get(k) != got.get(k):
            fail(f"_checks.DTYPES[torch.{k}]: {got.get(k)}, fluxcpp_dtype_t has {want.get(k)}")


def main():
    functions, typedefs = parse_header(HEADERS)
    if len(functions) < 10:
        fail(f"{HEADER}: only {len(functions)} FLUXCPP_API functions parsed")
    lib = load_lib()
    signatures = lib._SIGNATURES
    check_functions(functions, typedefs, signatures)
    check_callers(signatures)
    check_status(lib, typedefs)
    check_config(lib, typedefs)
    check_dtypes(typedefs)
    print(f"python.signatures: {len(functions)} functions in fluxcpp.h, {len(signatures)} in "
          f"_lib.py: {'ok' if not failures else f'{len(failures)} failure(s)'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
