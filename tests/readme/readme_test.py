"""Runs what README.md shows, taken from README.md's text, so the page cannot drift from working
programs and commands. Usage: readme_test.py MODE README BUILD_DIR WORK
  cpp     the C++ program of "## Use" (app.cpp), built against the package installed by the
          README's `cmake --install` line, run on 2 ranks
  c       the C program (app.c) and CMakeLists.txt of "## Use from C", then that section's shell
          blocks as written: the CMake build, the pkg-config build, the mpirun lines
  mpirun  every other `mpirun` line of the README's shell blocks, as written, in README.md's
          directory (ag_gemm_demo.py: the "Under mpirun" script, in a directory of its own),
          but those of FULL_ONLY (benchmarks)
  mpirun_full  the mpirun lines of FULL_ONLY
The only substitution is the build directory: `build` and `$PWD/build` in a command become
BUILD_DIR (the README assumes the build tree `build` beside it). HOME is WORK/home, so
`$HOME/opt/fluxcpp` is a fresh prefix. Each mpirun line runs with its block's `export` lines
before it and nothing else from the test suite: no --allow-run-as-root or --oversubscribe is
added, so a line that needs one and lacks it fails here (as root, and on a machine with fewer
cores than its ranks)."""
import os
import re
import shutil
import subprocess
import sys

mode, readme_path, build_dir, work = sys.argv[1:5]
readme = open(readme_path, encoding="utf-8").read()
build_dir = os.path.abspath(build_dir)

# mpirun lines not run by `mpirun` mode, and why. A new mpirun line must be run or listed here.
SKIPPED = {
    "build-app/app": "run by readme.c (and the C++ program by readme.cpp)",
    "./app": "run by readme.c",
}
# mpirun lines run by readme.mpirun_full (label full) instead: benchmarks, whose measuring takes
# longer than the rest of the page's lines together.
FULL_ONLY = {
    "scripts/bench_torch.py": "a benchmark (~25 s alone): run by readme.mpirun_full, label full; "
                              "python.bench_torch.np2 runs its --layer path small",
}
ROOT_EXPORT = "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"


def sections():
    """{heading: text} of the '## ' and '### ' sections (a section ends at its first subsection)."""
    parts = re.split(r"^###? (.+)$", readme, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def blocks(text, lang):
    return re.findall(r"^```" + lang + r"\n(.*?)^```", text, flags=re.S | re.M)


def section(name):
    s = sections()
    if name not in s:
        sys.exit(f"README.md has no '## {name}' section")
    return s[name]


def one_block(name, lang):
    b = blocks(section(name), lang)
    if len(b) != 1:
        sys.exit(f"README.md's '## {name}' has {len(b)} ```{lang} blocks, expected 1")
    return b[0]


def substitute(cmd):
    cmd = cmd.replace("$PWD/build", build_dir)
    return re.sub(r"(?<![\w./$-])build(?=/|\s|$)", build_dir, cmd)


def run(cmd, cwd, env=None):
    print(f"$ {cmd}   (in {cwd})", flush=True)
    r = subprocess.run(["bash", "-ec", cmd], cwd=cwd, env=env)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {cmd}")


def clean_env():
    """The environment of a fresh shell: HOME in WORK, and no Open MPI settings from the suite."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_")}
    # The project's Python environment stays the user's own (scripts/venv.sh finds it under the
    # real HOME).
    root = os.path.dirname(os.path.abspath(readme_path))
    env["FLUXCPP_VENV"] = subprocess.run([os.path.join(root, "scripts", "venv.sh")],
                                         capture_output=True, text=True).stdout.strip()
    env["HOME"] = os.path.join(work, "home")
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def check_mpirun_rules():
    """Every shell block that runs mpirun exports the root setting before its first mpirun, and
    every `mpirun -np ...` span in the prose is a line of some shell block (so it is run, or
    listed in SKIPPED)."""
    lines = set()
    for block in blocks(readme, "sh"):
        seen_export = False
        for line in block.splitlines():
            if line.startswith(ROOT_EXPORT):
                seen_export = True
            if re.search(r"(^|\s)mpirun\s", line):
                lines.add(line.split("#")[0].strip())
                if not seen_export:
                    sys.exit(f"README.md: '{line}' runs mpirun without '{ROOT_EXPORT}' before it "
                             "in its block")
    prose = re.sub(r"^```.*?^```", "", readme, flags=re.S | re.M)
    for span in re.findall(r"`([^`\n]*\bmpirun -np [^`\n]*)`", prose):  # commands only
        if span.strip() not in lines:
            sys.exit(f"README.md: the command `{span}` is in the prose only; put it in a shell "
                     "block so readme.mpirun runs it")


def install(env):
    """The README's install line (## Build by hand), build directory substituted."""
    line = [ln for ln in one_block("Build by hand", "sh").splitlines()
            if ln.startswith("cmake --install ")]
    if len(line) != 1:
        sys.exit("README.md's 'Build by hand' has no single `cmake --install` line")
    shutil.rmtree(os.path.join(env["HOME"], "opt"), ignore_errors=True)
    run(substitute(line[0].split("#")[0]), work, env)


def fresh_dir(name):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


os.makedirs(work, exist_ok=True)
env = clean_env()
check_mpirun_rules()

if mode == "c":
    install(env)
    app = fresh_dir("app_c")
    sec = section("Use from C")
    open(os.path.join(app, "app.c"), "w").write(one_block("Use from C", "c"))
    open(os.path.join(app, "CMakeLists.txt"), "w").write(one_block("Use from C", "cmake"))
    sh = blocks(sec, "sh")
    if not sh:
        sys.exit("README.md's 'Use from C' has no shell block")
    for block in sh:  # each block as one shell script, as a reader pastes it
        run(substitute(block), app, env)
elif mode == "cpp":
    install(env)
    app = fresh_dir("app_cpp")
    open(os.path.join(app, "app.cpp"), "w").write(one_block("Use", "cpp"))
    # What "## Use" says: the C section's CMakeLists with CXX, app.cpp and fluxcpp::fluxcpp.
    cml = one_block("Use from C", "cmake")
    for old, new in (("project(app C)", "project(app CXX)"), ("app.c)", "app.cpp)"),
                     ("fluxcpp::fluxcpp_c", "fluxcpp::fluxcpp")):
        if old not in cml:
            sys.exit(f"README.md's 'Use from C' CMake block has no '{old}'")
        cml = cml.replace(old, new)
    open(os.path.join(app, "CMakeLists.txt"), "w").write(cml)
    c_sh = blocks(section("Use from C"), "sh")[0]
    cmake_line = [ln for ln in c_sh.splitlines() if ln.startswith("cmake ")]
    run(cmake_line[0], app, env)
    run(f"{ROOT_EXPORT}\nmpirun -np 2 build-app/app", app, env)
elif mode in ("mpirun", "mpirun_full"):
    project_python = os.path.join(os.path.dirname(os.path.abspath(readme_path)), "scripts",
                                  "python")
    have_torch = subprocess.run([project_python, "-c", "import torch, mpi4py"],
                                capture_output=True).returncode == 0
    ran = 0
    for block in blocks(readme, "sh"):
        exports = []
        for line in block.splitlines():
            cmd = line.split("#")[0].strip()
            if cmd.startswith("export "):
                exports.append(substitute(cmd))
            if not re.search(r"(^|\s)mpirun\s", cmd):
                continue
            why = next((w for key, w in SKIPPED.items() if key in cmd), None)
            full_only = next((w for key, w in FULL_ONLY.items() if key in cmd), None)
            if mode == "mpirun" and full_only:
                why = full_only
            elif mode == "mpirun_full" and not full_only:
                continue
            if why:
                print(f"skipped: {cmd}  ({why})", flush=True)
                continue
            # In the checkout (README.md's directory), where the README's paths start.
            cwd = os.path.dirname(os.path.abspath(readme_path))
            if "scripts/python" in cmd and not have_torch:
                print(f"skipped: {cmd}  (scripts/python has no torch or mpi4py)", flush=True)
                continue
            cmd = re.sub(r"(^|\s)scripts/python\s", lambda m: f"{m.group(1)}{project_python} ",
                         cmd)
            if "ag_gemm_demo.py" in cmd:  # "the script below": the Python block under that name
                cwd = fresh_dir(f"mpirun_{ran}")
                open(os.path.join(cwd, "ag_gemm_demo.py"), "w").write(
                    one_block("Under mpirun", "python"))
            run("\n".join(exports + [substitute(cmd)]), cwd, env)
            ran += 1
    if ran == 0:
        sys.exit("README.md: no mpirun line was run")
    print(f"{ran} mpirun lines of README.md ran", flush=True)
else:
    sys.exit(f"unknown mode {mode}")
