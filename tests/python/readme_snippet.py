"""Runs the Python block of README.md's "Use from PyTorch" section exactly as written
(argv[1]: README.md), so the snippet a newcomer copies is the one the suite tests."""
import re
import sys

text = open(sys.argv[1], encoding="utf-8").read()
section = text.split("## Use from PyTorch", 1)
if len(section) != 2:
    sys.exit("README.md has no '## Use from PyTorch' section")
match = re.search(r"```python\n(.*?)```", section[1], re.S)
if not match:
    sys.exit("README.md's 'Use from PyTorch' section has no ```python block")
exec(compile(match.group(1), "README.md (Use from PyTorch)", "exec"), {"__name__": "__main__"})
