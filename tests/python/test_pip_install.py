"""python.pip_install: `pip install .` (pyproject.toml) into a fresh virtual environment, then the
installed package alone: the issue's one-liner, fluxcpp.__version__, and 2 ranks on the
torch.distributed backend "fluxcpp" and a fluxcpp op (docs/python.md, "Install with pip").

Run by the project's Python (scripts/python), which holds torch and scikit-build-core (pinned in
python/requirements.txt). The fresh environment is `python -m venv --system-site-packages
--without-pip` plus a .pth file naming the project environment's site-packages:
  * the .pth lets it see that environment's torch, pip and scikit-build-core (installed once, 5 GB
    for torch), so nothing is downloaded (PIP_NO_INDEX) and the build runs without isolation;
  * --system-site-packages gives it Debian's packages (mpi4py, NumPy), as the project
    environment has them;
  * --without-pip: a venv's own pip and setuptools would come before the project's, and pip would
    then want a newer setuptools (torch requires one) from the index.
The venv's own site-packages comes first on sys.path, so `import fluxcpp` is the installed copy,
which the checks assert (package, library and backend under the venv, listed in the wheel's
RECORD). Everything runs from a temporary directory (outside the source tree, PYTHONPATH and
FLUXCPP_LIBRARY unset), under a watchdog, and the directory is removed at the end.

Extra arguments go to pip, and these make the test fail: no library in the wheel,
  --config-settings=wheel.exclude=fluxcpp/lib/libfluxcpp.so
or no backend,
  --config-settings=cmake.define.FLUXCPP_TORCH_BACKEND=OFF
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PIP_TIMEOUT = 1200  # a cold build: ~100 s on 2 idle cores, ~5 s from ccache
RUN_TIMEOUT = 180

ONE_LINER = "import fluxcpp; import torch.distributed as d; d.Backend('fluxcpp')"

CHECK = r'''
import importlib.metadata as md, multiprocessing as mp, os, sys, time
import torch, torch.distributed as dist
import fluxcpp


def check_install(venv, version):
    pkg = os.path.dirname(os.path.realpath(fluxcpp.__file__))
    assert pkg.startswith(os.path.realpath(venv) + os.sep), f"fluxcpp imported from {pkg}"
    lib = os.path.realpath(fluxcpp.LIBRARY_PATH)
    assert lib == os.path.join(pkg, "lib", "libfluxcpp.so"), f"libfluxcpp loaded from {lib}"
    assert fluxcpp.__version__ == version, (fluxcpp.__version__, version)
    assert md.version("fluxcpp") == version, (md.version("fluxcpp"), version)
    record = {str(f) for f in md.files("fluxcpp")}
    for f in ("fluxcpp/__init__.py", "fluxcpp/_config.py", "fluxcpp/lib/libfluxcpp.so",
              "fluxcpp/_c10d.so", "fluxcpp/include/fluxcpp/fluxcpp.h"):
        assert f in record, f"{f} is not in the wheel"
    assert fluxcpp.distributed.available(), "the installed package has no backend (_c10d.so)"
    return pkg


def rank_main(rank, world, path):
    dist.init_process_group("fluxcpp", init_method="file://" + path, rank=rank,
                            world_size=world)
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x)
    assert x.tolist() == [3.0] * 5, x
    with fluxcpp.Context.from_group() as ctx, fluxcpp.AllReduce(ctx, max_count=64) as ar:
        y = ar(torch.full((64,), float(rank + 1)))
        assert torch.equal(y, torch.full((64,), 3.0)), y
    dist.destroy_process_group()


if __name__ == "__main__":
    venv, version, tmp = sys.argv[1:4]
    pkg = check_install(venv, version)
    procs = [mp.get_context("spawn").Process(target=rank_main,
                                             args=(r, 2, os.path.join(tmp, "pg")))
             for r in range(2)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 120
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    codes = [p.exitcode for p in procs]
    assert codes == [0, 0], f"ranks exited with {codes}"
    print(f"installed fluxcpp {fluxcpp.__version__} at {pkg}: backend and AllReduce on 2 ranks ok")
'''


def run(cmd, env, cwd, timeout, log=None):
    """cmd in a session of its own, killed with all its children after timeout seconds."""
    t0 = time.monotonic()
    with subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True,
                          stdout=log or None, stderr=subprocess.STDOUT if log else None) as p:
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise SystemExit(f"FAIL: timed out after {timeout} s: {' '.join(cmd)}")
    print(f"{time.monotonic() - t0:6.1f} s  rc {rc}  {' '.join(cmd)}", flush=True)
    return rc


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(fluxcpp VERSION ([0-9.]+)", f.read()).group(1)


def main():
    try:
        import scikit_build_core  # noqa: F401
    except ImportError:
        raise SystemExit(f"FAIL: {sys.executable} has no scikit-build-core: "
                         "scripts/install_deps.sh --python installs python/requirements.txt")
    tmp = tempfile.mkdtemp(prefix="fluxcpp-pip-")
    try:
        venv = os.path.join(tmp, "venv")
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "FLUXCPP_LIBRARY", "VIRTUAL_ENV")
               and not k.startswith("PIP_")}
        env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", TMPDIR=tmp,
                   PYTHONDONTWRITEBYTECODE="1")
        if shutil.which("ccache"):
            for lang in ("C", "CXX"):
                env.setdefault(f"CMAKE_{lang}_COMPILER_LAUNCHER", "ccache")
            # Every path relative to the compiler's directory (in the temporary build directory,
            # whose name changes): the next run of this test hits the cache.
            env.update(CCACHE_BASEDIR=os.path.commonpath([ROOT, tmp]), CCACHE_NOHASHDIR="1")
        if run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
               env, tmp, RUN_TIMEOUT):
            raise SystemExit("FAIL: python -m venv")
        py = os.path.join(venv, "bin", "python")
        site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              env=env, cwd=tmp, capture_output=True, text=True, check=True,
                              timeout=RUN_TIMEOUT).stdout.strip()
        ours = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
        with open(os.path.join(site, "fluxcpp-project-env.pth"), "w") as f:
            f.write("".join(p + "\n" for p in ours))

        log_path = os.path.join(tmp, "pip.log")
        with open(log_path, "w") as log:
            build_dir = "--config-settings=build-dir=" + os.path.join(tmp, "build")
            rc = run([py, "-m", "pip", "install", "-v", "--no-build-isolation", build_dir,
                      *sys.argv[1:], ROOT], env, tmp, PIP_TIMEOUT, log)
        if rc:
            with open(log_path) as f:
                sys.stdout.write(f.read()[-6000:])
            raise SystemExit("FAIL: pip install")
        with open(log_path) as f:
            backend = [ln.strip() for ln in f if "torch.distributed backend" in ln]
        print("\n".join(backend))

        if run([py, "-c", ONE_LINER], env, tmp, RUN_TIMEOUT):
            raise SystemExit("FAIL: the issue's one-liner")
        check = os.path.join(tmp, "check.py")
        with open(check, "w") as f:
            f.write(CHECK)
        if run([py, check, venv, project_version(), tmp], env, tmp, RUN_TIMEOUT):
            raise SystemExit("FAIL: the installed package")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("python.pip_install: ok")


if __name__ == "__main__":
    main()
