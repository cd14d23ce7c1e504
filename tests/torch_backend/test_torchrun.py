"""The README's torchrun recipe, for real: torchrun_script.py (plain dist.* calls and DDP) under
`python3 -m torch.distributed.run --nproc_per_node W` with backend "fluxcpp" and with "gloo";
the results must match: bitwise at W = 2 (a sum of two is order-free; gloo and fluxcpp then add
the same two numbers), within 1e-5 relative at larger W.

    test_torchrun.py [W]"""
import atexit
import os
import subprocess
import sys
import shutil
import tempfile

import torch

from procs import free_port  # tests/python (on PYTHONPATH in the suite)

W = int(sys.argv[1]) if len(sys.argv) > 1 else 2
here = os.path.dirname(os.path.abspath(__file__))
tmp = tempfile.mkdtemp(prefix="fluxcpp_torchrun_")
atexit.register(shutil.rmtree, tmp, True)  # its logs and files go with it
# torchrun keeps a log folder of its own in the temp dir (torchelastic_*) and never removes it:
# the children take ours, which goes at exit.
os.environ["TMPDIR"] = tmp
results = {}
for backend in ("fluxcpp", "gloo"):
    out = os.path.join(tmp, f"{backend}.pt")
    # Debian's torch 1.13 under Python 3.11: torchrun needs --redirects 1 --tee 1
    # (docs/torch_backend.md).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(W),
           "--master_port", str(free_port()),
           "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(tmp, backend),
           os.path.join(here, "torchrun_script.py"), "--backend", backend, "--out", out]
    rc = subprocess.run(cmd, timeout=240).returncode
    if rc != 0:
        print(f"FAIL: torchrun with {backend} exited {rc}")
        sys.exit(1)
    results[backend] = torch.load(out)
bad = []
for key, ours in results["fluxcpp"].items():
    theirs = results["gloo"][key]
    if W == 2 or key in ("all_gather", "broadcast", "all_to_all", "max"):
        ok = torch.equal(ours, theirs)
    else:
        ok = torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    print(f"{key}: {'match' if ok else 'DIFFER'}")
    if not ok:
        bad.append(key)
print("PASS" if not bad else f"FAIL: {bad}")
sys.exit(1 if bad else 0)
