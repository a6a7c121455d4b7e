#!/usr/bin/env bash
# Train one arm of the README's first protocol alone and print its checkpoints, to find what moves them.
#
#   bash docs/reproducibility/drift_probe.sh LABEL [ARM] [PACKAGE==VERSION ...]
#
# PACKAGE==VERSION pins are installed (without their dependencies) into an overlay folder put
# first on PYTHONPATH, so one package differs from the locked .venv and nothing else does; set
# ATEN_CPU_CAPABILITY (default, avx2, avx512) to make torch dispatch to another CPU kernel set.
# One thread, as each process of the README's `--parallel 2` run trains. Prints LABEL, the arm's
# checkpoints (stage: SHA-256) and the loss at its 20th step.
set -euo pipefail
cd "$(dirname "$0")/../.."
label=${1:?usage: drift_probe.sh LABEL [ARM] [PACKAGE==VERSION ...]}
arm=${2:-B}
shift $(( $# >= 2 ? 2 : 1 ))
work=$(mktemp -d "${TMPDIR:-/tmp}/drift-probe.XXXXXX")
trap 'rm -rf "$work"' EXIT
overlay=""
if (( $# )); then
    .venv/bin/python -m pip install -qq --no-compile --no-deps --target "$work/overlay" "$@"
    overlay="$work/overlay"
fi
PYTHONPATH="$overlay" OMP_NUM_THREADS=1 .venv/bin/ledger run protocols/phaseA-tiny.yaml --arms "$arm" --no-judge \
    --no-progress --db "sqlite:///$work/ledger.db" --out "$work/out" >"$work/stdout" 2>&1 || { tail -5 "$work/stdout"; exit 1; }
PYTHONPATH="$overlay" .venv/bin/python - "$work/ledger.db" "$arm" "$label" "$*" <<'PY'
import json, sqlite3, sys
db, arm, label, pins = sys.argv[1:]
rows = sqlite3.connect(db).execute(
    "select stage, sha256, meta_json from checkpoints where arm = ? order by id", (arm,)).fetchall()
first = json.loads(rows[0][2]).get("losses", [None] * 20) if rows else []
print(f"{label} [{pins or 'the lock'}]: " + "; ".join(f"{stage} {sha[:12]}" for stage, sha, _ in rows)
      + (f"; loss at step 20 {first[19]!r}" if len(first) >= 20 else ""))
PY
