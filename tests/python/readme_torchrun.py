"""A README section's first Python block, as written, under real torchrun with the command line
the block's first comment gives (`# name.py: python3 -m torch.distributed.run ...`).
argv[1]: README.md, argv[2]: the section's title (any heading level). torchrun gets a port of
its own (--master_port), so tests side by side do not meet; every other option is the README's."""
import os
import re
import shlex
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
if command[:3] != ["python3", "-m", "torch.distributed.run"] or command[-1] != name:
    sys.exit(f"the block's command is not 'python3 -m torch.distributed.run ... {name}': {first!r}")
command[0] = sys.executable
with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
        f.write(code)
    command.insert(3, f"--master_port={29700 + os.getpid() % 200}")
    print("running:", " ".join(command), flush=True)
    sys.exit(subprocess.run(command, cwd=tmp, timeout=240).returncode)
