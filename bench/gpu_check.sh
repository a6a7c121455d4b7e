#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py) from the repository root, cut off after 8 minutes.
#   bash bench/gpu_check.sh                       # on a CUDA machine, from a fresh clone
#   bash bench/gpu_check.sh --json gpu_check.json
#   bash bench/gpu_check.sh --device cpu --small  # a dry run anywhere
#
# The Python it runs with: $GPU_CHECK_PYTHON if set; else, for a CPU dry run, .venv; for a GPU, the first
# of .venv-cuda and .venv whose torch sees a GPU. Where none does and the machine has one (nvidia-smi),
# the CUDA lock is installed into .venv-cuda (VENV=.venv-cuda bash requirements/install.sh --cuda):
# a .venv holding the CPU wheel is never taken for "no GPU".
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cpu=0
for arg in "$@"; do [[ "$arg" == cpu || "$arg" == --device=cpu ]] && cpu=1; done
sees_gpu() { "$1" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }

python=${GPU_CHECK_PYTHON:-}
if [[ -z "$python" && "$cpu" == 1 ]]; then
    python=.venv/bin/python
    [[ -x "$python" ]] || python=python3
elif [[ -z "$python" ]]; then
    for candidate in .venv-cuda/bin/python .venv/bin/python; do
        if [[ -x "$candidate" ]] && sees_gpu "$candidate"; then python=$candidate; break; fi
    done
    if [[ -z "$python" ]] && command -v nvidia-smi >/dev/null; then
        echo "gpu_check: no environment here has a CUDA torch; installing requirements/cuda.lock into .venv-cuda" >&2
        if VENV=.venv-cuda bash requirements/install.sh --cuda; then
            python=.venv-cuda/bin/python
        else
            echo "gpu_check: installing the CUDA lock failed (above); install it where PyPI is reachable and set GPU_CHECK_PYTHON" >&2
            exit 2
        fi
    fi
    # no GPU at all: gpu_check.py says so in one line (exit 2)
    [[ -n "$python" ]] || python=$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)
fi
exec timeout 480 "$python" bench/gpu_check.py "$@"
