"""torchrun across hosts with no MPI anywhere: two torchrun agents (--nnodes 2, one per
simulated host: FLUXCPP_HOST_ID tells them apart, the loopback carries the library's TCP channel)
run llama_hosts_worker.py, whose ranks check the Llama example's fused layers and its
dist.all_reduce over the "fluxcpp" backend against one rank.

    test_torchrun_hosts.py [nproc_per_node]     (default 1: 2 hosts x 1 rank)"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

from procs import free_port  # tests/python (on PYTHONPATH in the suite)

per_host = int(sys.argv[1]) if len(sys.argv) > 1 else 1
here = os.path.dirname(os.path.abspath(__file__))
tmp = tempfile.mkdtemp(prefix="fluxcpp_torchrun_hosts_")
atexit.register(shutil.rmtree, tmp, True)  # its logs and files go with it
# torchrun keeps a log folder of its own in the temp dir (torchelastic_*) and never removes it:
# the children take ours, which goes at exit.
os.environ["TMPDIR"] = tmp
port = free_port()
agents = []
for node in range(2):
    env = dict(os.environ, FLUXCPP_HOST_ID=f"simulated-host-{node}", FLUXCPP_SOCKET_IFNAME="lo")
    # Debian's torch 1.13 under Python 3.11: torchrun needs --redirects 1 --tee 1
    # (docs/torch_backend.md).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank",
           str(node), "--nproc_per_node", str(per_host), "--master_addr", "127.0.0.1",
           "--master_port", str(port), "--redirects", "1", "--tee", "1", "--log_dir",
           os.path.join(tmp, f"node{node}"), os.path.join(here, "llama_hosts_worker.py")]
    agents.append(subprocess.Popen(cmd, env=env))
status = 0
for node, p in enumerate(agents):
    try:
        rc = p.wait(timeout=240)
    except subprocess.TimeoutExpired:
        print(f"FAIL: the agent of host {node} still runs after 240 s: killing both")
        for q in agents:
            q.kill()
        rc = -1
    if rc != 0:
        print(f"FAIL: the agent of host {node} exited {rc}")
        status = 1
print("PASS" if status == 0 else "FAIL")
sys.exit(status)
