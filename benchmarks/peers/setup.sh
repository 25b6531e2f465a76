#!/usr/bin/env bash
# Make the peers' virtual environments for benchmarks/run.py: MXNet 1.9.1 and PyTorch (CPU), each in its own venv
# (never a symgrad dependency; MXNet 1.9.1 needs numpy < 1.24, which symgrad's own environment does not use).
#
#   bash benchmarks/peers/setup.sh [DIR]      # DIR/mxvenv and DIR/torchvenv; DIR defaults to the checkout's parent
#
# run.py looks for DIR/mxvenv/bin/python and DIR/torchvenv/bin/python beside the checkout (or --mxnet/--torch,
# or $SYMGRAD_BENCH_MXNET/$SYMGRAD_BENCH_TORCH). A venv whose framework already imports is left as it is.
# PyTorch: the CPU-only wheel from PyTorch's own index if it answers; else a local "+cpu" wheel from pip's
# find-links folders (or $TORCH_WHEEL); else PyPI's `torch`, whose Linux wheel brings the CUDA libraries
# (several GB; it runs on the CPU all the same).
set -euo pipefail

PYTHON=${PYTHON:-python3}
DIR=${1:-$(cd "$(dirname "$0")/../../.." && pwd)}
MXVENV=$DIR/mxvenv
TORCHVENV=$DIR/torchvenv

imports() {  # imports VENV MODULE: does the venv's Python import it?
    [ -x "$1/bin/python" ] && "$1/bin/python" -c "import $2" >/dev/null 2>&1
}

make_venv() {
    [ -x "$1/bin/python" ] || "$PYTHON" -m venv "$1"
    "$1/bin/python" -m pip install --quiet --upgrade pip
}

setup_mxnet() {
    if imports "$MXVENV" mxnet; then
        echo "MXNet: $MXVENV already has $("$MXVENV/bin/python" -c 'import mxnet; print(mxnet.__version__)')"
        return
    fi
    make_venv "$MXVENV"
    "$MXVENV/bin/python" -m pip install "mxnet==1.9.1" "numpy<1.24"
}

local_cpu_wheel() {  # a torch-*+cpu-*.whl for this Python in $TORCH_WHEEL or pip's find-links folders, if any
    if [ -n "${TORCH_WHEEL:-}" ]; then echo "$TORCH_WHEEL"; return; fi
    local tag links dir
    tag=$("$TORCHVENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
    links="${PIP_FIND_LINKS:-} $("$TORCHVENV/bin/python" -m pip config list 2>/dev/null \
        | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr '\n' ' ')"
    for dir in $links; do
        dir=${dir#file://}
        [ -d "$dir" ] || continue
        ls "$dir"/torch-*+cpu-"$tag"-*.whl 2>/dev/null | sort -V | tail -1
    done | tail -1
}

setup_torch() {
    if imports "$TORCHVENV" torch; then
        echo "PyTorch: $TORCHVENV already has $("$TORCHVENV/bin/python" -c 'import torch; print(torch.__version__)')"
        return
    fi
    make_venv "$TORCHVENV"
    local pip="$TORCHVENV/bin/python -m pip install"
    # 1. PyTorch's CPU index alone, which also serves torch's dependencies and numpy (no local pip config and
    #    no other index: either could hand over a CUDA build instead)
    if PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS="" PIP_EXTRA_INDEX_URL="" $pip --retries 1 --timeout 20 \
            torch numpy --index-url https://download.pytorch.org/whl/cpu; then
        return
    fi
    # 2. a CPU wheel that pip's configuration already points at
    local wheel
    wheel=$(local_cpu_wheel)
    if [ -n "$wheel" ] && $pip "$wheel" numpy; then
        return
    fi
    # 3. PyPI's torch (CUDA build; large)
    echo "PyTorch: no CPU-only wheel found; installing PyPI's torch (it brings the CUDA libraries)" >&2
    $pip torch numpy
}

setup_mxnet
setup_torch
echo "MXNet:   $("$MXVENV/bin/python" -c 'import mxnet, numpy; print(mxnet.__version__, "numpy", numpy.__version__)')"
echo "PyTorch: $("$TORCHVENV/bin/python" -c 'import torch, numpy; print(torch.__version__, "numpy", numpy.__version__)')"
echo "benchmarks/run.py finds them beside the checkout (or pass --mxnet $MXVENV/bin/python --torch $TORCHVENV/bin/python)"
