"""Runs a Python block of README.md exactly as written (argv[1]: README.md), so the snippet a
newcomer copies is the one the suite tests. Without argv[2]: the first block of "Under mpirun",
executed here (under mpirun). With argv[2], a section title: that section's first
block, written to a file and run as its own script (it starts its ranks itself)."""
import os
import re
import subprocess
import sys
import tempfile

title = sys.argv[2] if len(sys.argv) > 2 else "Under mpirun"
text = open(sys.argv[1], encoding="utf-8").read()
section = re.split(r"^#+ " + re.escape(title) + r"\n", text, maxsplit=1, flags=re.M)
if len(section) != 2:
    sys.exit(f"README.md has no '{title}' section")
match = re.search(r"```python\n(.*?)```", section[1], re.S)
if not match:
    sys.exit(f"README.md's '{title}' section has no ```python block")
if len(sys.argv) > 2:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "snippet.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(match.group(1))
        sys.exit(subprocess.run([sys.executable, path], timeout=240).returncode)
exec(compile(match.group(1), f"README.md ({title})", "exec"), {"__name__": "__main__"})
