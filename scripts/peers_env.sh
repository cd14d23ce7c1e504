#!/usr/bin/env bash
# The Python environment of the peers that scripts/bench_peers.sh and scripts/bench_hf_tp.sh
# --autotp compare fluxcpp with: DeepSpeed and oneCCL's CPU packages (python/requirements-peers*.txt)
# in a virtual environment of their own, layered on the project's (scripts/venv.sh): a .pth file
# puts the project environment's packages (torch, transformers, ...) and Debian's after its own,
# so pip finds torch there, installs only what the peers add, and python/requirements.txt as
# constraints holds torch at its pin. The project's environment itself is never changed: merely
# installed there, DeepSpeed would be imported by transformers' save_pretrained in every test.
# Its directory: $FLUXCPP_PEERS_VENV, else the project environment's followed by -peers-<hash of
# the three requirement files>.
# Usage: scripts/peers_env.sh            prints its directory
#        scripts/peers_env.sh --install  makes it (idempotent: nothing happens when complete);
#                                        scripts/install_deps.sh --peers calls it
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="$("$root/scripts/venv.sh")"
reqs=("$root/python/requirements.txt" "$root/python/requirements-peers.txt"
      "$root/python/requirements-peers-nodeps.txt")
hash=$(cat "${reqs[@]}" | sha256sum | cut -c1-12)
env="${FLUXCPP_PEERS_VENV:-$base-peers-$hash}"
if [ "${1:-}" != "--install" ]; then
  echo "$env"
  exit 0
fi
stamp="$env/.fluxcpp-peers-complete"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ] && [ -x "$env/bin/python" ]; then
  exit 0
fi
if [ ! -x "$base/bin/python" ]; then
  echo "peers_env: no project environment at $base: run scripts/install_deps.sh --python" >&2
  exit 1
fi
echo "peers_env: installing python/requirements-peers*.txt into $env (PyPI)" >&2
tmp="$env.partial.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv "$tmp"
site=$("$tmp/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The project environment's search path after the standard library, in its order.
"$base/bin/python" -c 'import sys, sysconfig
std = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
print("\n".join(p for p in sys.path[1:] if p and p not in std and not p.endswith((".zip", "lib-dynload"))))' \
  >"$site/fluxcpp_project_env.pth"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# DS_ACCELERATOR=cpu: DeepSpeed's setup.py then neither asks for nvidia-ml-py nor looks for CUDA;
# no build isolation, so its setup.py sees the project's torch instead of fetching another.
DS_ACCELERATOR=cpu DS_BUILD_OPS=0 "$tmp/bin/python" -m pip install -q --no-cache-dir \
  --no-build-isolation -c "${reqs[0]}" -r "${reqs[1]}" >&2
"$tmp/bin/python" -m pip install -q --no-cache-dir --no-deps -r "${reqs[2]}" >&2
want=$(sed -n 's/^torch==//p' "${reqs[0]}")
have=$("$tmp/bin/python" -c "import torch; print(torch.__version__.split('+')[0], torch.__file__)")
case "$have" in
  "$want $base/"*) ;;
  *) echo "peers_env: torch is '$have', not $want from $base" >&2; exit 1 ;;
esac
echo "$hash" >"$tmp/.fluxcpp-peers-complete"
rm -rf "$env"
# A venv's scripts name its directory: made under the temporary name, they are rewritten.
grep -rlI --null "$tmp" "$tmp/bin" | xargs -0 -r sed -i "s|$tmp|$env|g"
mv "$tmp" "$env"
trap - EXIT
