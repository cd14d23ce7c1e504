"""The README's "torch.distributed backend" block, as written, under real torchrun with the
command line its first comment gives (argv[1]: README.md)."""
import os
import re
import shlex
import subprocess
import sys
import tempfile

text = open(sys.argv[1], encoding="utf-8").read()
section = re.split(r"^## torch\.distributed backend\n", text, maxsplit=1, flags=re.M)
if len(section) != 2:
    sys.exit("README.md has no 'torch.distributed backend' section")
block = re.search(r"```python\n(.*?)```", section[1], re.S)
if not block:
    sys.exit("the section has no ```python block")
code = block.group(1)
first = code.splitlines()[0]
m = re.match(r"# (\w+\.py): (.*)$", first)
if not m:
    sys.exit(f"the block's first line names no command: {first!r}")
name, command = m.group(1), shlex.split(m.group(2))
if command[0] == "python3":
    command[0] = sys.executable
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
        f.write(code)
    port = str(29700 + os.getpid() % 200)
    command[command.index("torch.distributed.run") + 1:1] = []  # keep the README's options
    command.insert(command.index("torch.distributed.run") + 1, "--master_port=" + port)
    print("running:", " ".join(command))
    sys.exit(subprocess.run(command, cwd=tmp, timeout=240).returncode)
