#!/usr/bin/env bash
# Installs fluxcpp's build and test dependencies from Debian 12 packages (oneDNN is libdnnl-dev).
# Idempotent: prints nothing and touches nothing when everything is already present.
# --python also installs what the Python module's tests need (Debian's PyTorch, mpi4py, NumPy)
# and scripts/plot_bench.py (Matplotlib), all for /usr/bin/python3, and what the torch.distributed
# backend builds against (libtorch-dev, pybind11-dev, the Python headers); the library never
# needs them.
# Usage: scripts/install_deps.sh [--python]
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
python_packages=(python3-torch python3-mpi4py python3-numpy python3-matplotlib
  libtorch-dev pybind11-dev libpython3-dev)
for arg in "$@"; do
  case "$arg" in
    --python) packages+=("${python_packages[@]}") ;;
    *) echo "install_deps: unknown argument $arg (usage: install_deps.sh [--python])" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
