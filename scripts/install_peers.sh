#!/usr/bin/env bash
# The Python side of scripts/install_deps.sh --peers: DeepSpeed and oneCCL's CPU packages, pinned
# in python/requirements-peers*.txt, into the project's virtual environment (scripts/venv.sh),
# with python/requirements.txt as constraints so torch keeps its pin. Idempotent: a stamp holding
# the hash of the three files makes a second run do nothing; a change of pins installs again.
# Usage: scripts/install_peers.sh   (after scripts/install_deps.sh --python)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$("$root/scripts/venv.sh")"
if [ ! -x "$venv/bin/python" ]; then
  echo "install_peers: no environment at $venv: run scripts/install_deps.sh --python" >&2
  exit 1
fi
reqs=("$root/python/requirements.txt" "$root/python/requirements-peers.txt"
      "$root/python/requirements-peers-nodeps.txt")
hash=$(cat "${reqs[@]}" | sha256sum | cut -c1-12)
stamp="$venv/.fluxcpp-peers-complete"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  exit 0
fi
echo "install_peers: installing python/requirements-peers*.txt into $venv (PyPI)" >&2
export PIP_DISABLE_PIP_VERSION_CHECK=1
# DS_ACCELERATOR=cpu: DeepSpeed's setup.py then neither asks for nvidia-ml-py nor looks for CUDA;
# no build isolation, so its setup.py sees the environment's torch instead of fetching another.
DS_ACCELERATOR=cpu DS_BUILD_OPS=0 "$venv/bin/python" -m pip install -q --no-cache-dir \
  --no-build-isolation -c "${reqs[0]}" -r "${reqs[1]}" >&2
"$venv/bin/python" -m pip install -q --no-cache-dir --no-deps -r "${reqs[2]}" >&2
want=$(sed -n 's/^torch==//p' "${reqs[0]}")
have=$("$venv/bin/python" -c "import torch; print(torch.__version__.split('+')[0])")
if [ "$have" != "$want" ]; then
  echo "install_peers: torch is $have, not $want, after the install" >&2
  exit 1
fi
echo "$hash" >"$stamp"
