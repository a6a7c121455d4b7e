#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py) from the repository root, cut off after 8 minutes.
#   bash bench/gpu_check.sh                       # on a CUDA machine
#   bash bench/gpu_check.sh --json gpu_check.json
#   bash bench/gpu_check.sh --device cpu --small  # a dry run anywhere
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -x .venv/bin/python ]]; then
    python=.venv/bin/python
else
    python=python3
fi
exec timeout 480 "$python" bench/gpu_check.py "$@"
