#!/usr/bin/env bash
# Installs fluxcpp's build and test dependencies from Debian 12 packages (oneDNN is libdnnl-dev).
# Idempotent: prints nothing and touches nothing when everything is already present.
# --python also installs, for the Python module, its tests, the torch.distributed backend and
# the benchmarks: Debian's mpi4py, NumPy, Matplotlib and the Python headers, and a virtual
# environment of Debian's python3 (its own packages visible) holding PyPI's torch 2.x and
# transformers, pinned in python/requirements.txt (scripts/python runs it; scripts/venv.sh says
# where it is). Debian's Python is never changed. The library never needs any of them.
# --peers (implies --python) also installs what scripts/bench_peers.sh compares fluxcpp with:
# python/requirements-peers.txt (DeepSpeed) and python/requirements-peers-nodeps.txt (oneCCL's
# CPU runtime and headers) into an environment layered on that one, which stays unchanged
# (scripts/peers_env.sh; python/requirements.txt as constraints: torch keeps its pin), and
# Debian's libfabric1 (oneCCL's transport). A stamp makes a second run do nothing. Neither the
# tests nor .ci/run use --peers.
# Usage: scripts/install_deps.sh [--python] [--peers]
set -euo pipefail

packages=(
  build-essential cmake git pkg-config ccache
  openmpi-bin libopenmpi-dev
  libhwloc-dev libnuma-dev
  libopenblas-dev libdnnl-dev
  libfmt-dev libgloo-dev libssl-dev
  libgtest-dev
  iproute2 util-linux
)
python_packages=(python3-venv python3-mpi4py python3-numpy python3-matplotlib libpython3-dev)
peer_packages=(libfabric1)
python=0
peers=0
for arg in "$@"; do
  case "$arg" in
    --python) python=1 ;;
    --peers) python=1; peers=1 ;;
    *) echo "install_deps: unknown argument $arg (usage: install_deps.sh [--python] [--peers])" >&2
       exit 2 ;;
  esac
done
if [ "$python" = 1 ]; then packages+=("${python_packages[@]}"); fi
if [ "$peers" = 1 ]; then packages+=("${peer_packages[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
install_venv() {
  [ "$python" = 1 ] || return 0
  "$(dirname "$0")/venv.sh" --install
  [ "$peers" = 1 ] || return 0
  "$(dirname "$0")/peers_env.sh" --install
}
[ ${#missing[@]} -eq 0 ] && { install_venv; exit 0; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install_deps: missing packages (${missing[*]}) and not root; install them and retry" >&2
    exit 1
  fi
fi
echo "install_deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_venv
