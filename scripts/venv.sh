#!/usr/bin/env bash
# The project's Python environment: a virtual environment of Debian's /usr/bin/python3 that also
# sees Debian's packages (mpi4py, NumPy) and holds PyPI's torch 2.x and transformers, pinned in
# python/requirements.txt. One per user, shared by every clone: $FLUXCPP_VENV, else
# ${XDG_CACHE_HOME:-~/.cache}/fluxcpp/venv-<hash of the requirements>, so a change of pins makes
# a new one and never half-upgrades an old one.
# Usage: scripts/venv.sh            prints its directory
#        scripts/venv.sh --install  makes it (idempotent: nothing happens when it is complete)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
req="$root/python/requirements.txt"
hash=$(sha256sum "$req" | cut -c1-12)
venv="${FLUXCPP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fluxcpp/venv-$hash}"
if [ "${1:-}" != "--install" ]; then
  echo "$venv"
  exit 0
fi
stamp="$venv/.fluxcpp-complete"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
echo "venv.sh: installing python/requirements.txt into $venv (PyPI; ~5 GB, about a minute)" >&2
mkdir -p "$(dirname "$venv")"
# Made aside and moved into place when complete: an interrupted install leaves no half venv.
tmp="$venv.partial.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$tmp"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$tmp/bin/python" -m pip install -q --no-cache-dir \
  -r "$req" >&2
echo "$hash" >"$tmp/.fluxcpp-complete"
rm -rf "$venv"
# A venv's scripts name its directory: made under the temporary name, they are rewritten.
grep -rlI --null "$tmp" "$tmp/bin" | xargs -0 -r sed -i "s|$tmp|$venv|g"
mv "$tmp" "$venv"
trap - EXIT
"$venv/bin/python" -c "import torch, transformers" >&2
