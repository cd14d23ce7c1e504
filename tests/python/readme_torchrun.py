"""A README section's first Python block, as written, under real torchrun with the command line
the block's first comment gives (`# name.py: scripts/python -m torch.distributed.run ...`).
argv[1]: README.md, argv[2]: the section's title (any heading level). torchrun gets a port of
its own (--master_port, a free one), so tests side by side do not meet; every other option is the README's."""
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile

readme, title = sys.argv[1], sys.argv[2]
text = open(readme, encoding="utf-8").read()
section = re.split(r"^#+ " + re.escape(title) + r"\n", text, maxsplit=1, flags=re.M)
if len(section) != 2:
    sys.exit(f"README.md has no '{title}' section")
block = re.search(r"```python\n(.*?)```", section[1], re.S)
if not block:
    sys.exit(f"the section '{title}' has no ```python block")
code = block.group(1)
first = code.splitlines()[0]
m = re.match(r"# (\w+\.py): (.*)$", first)
if not m:
    sys.exit(f"the block's first line names no command: {first!r}")
name, command = m.group(1), shlex.split(m.group(2))
if command[:3] != ["scripts/python", "-m", "torch.distributed.run"] or command[-1] != name:
    sys.exit(f"the block's command is not 'scripts/python -m torch.distributed.run ... {name}': "
             f"{first!r}")
command[0] = sys.executable
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
        f.write(code)
    with socket.socket() as sock:  # a free port: tests side by side never share one
        sock.bind(("127.0.0.1", 0))
        command.insert(3, f"--master_port={sock.getsockname()[1]}")
    print("running:", " ".join(command), flush=True)
    # TMPDIR: torchrun's own log folder (torchelastic_*, which torchrun never removes) goes with ours.
    proc = subprocess.Popen(command, cwd=tmp, start_new_session=True,
                            env=dict(os.environ, TMPDIR=tmp))
    try:
        sys.exit(proc.wait(timeout=240))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers: nothing left running
        proc.wait()
        sys.exit("torchrun did not finish within 240 s (watchdog)")
