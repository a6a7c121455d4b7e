#!/usr/bin/env bash
# The release check: the real-scale checks that CI leaves out, run before a record is committed or a release made.
#
#   bash bench/release_check.sh                # every check marked `release` (about 40 minutes on 2 cores, 24 GiB)
#   bash bench/release_check.sh -- -k llama32  # one of them (pytest's options after --)
#
# Today that is the README's first command whole, reproduced against its record (about 16 minutes; CI's long call
# reproduces one seed of it), and the three papers' protocols (phaseA, designM-tinyllama, designM-llama32) dry-run with random
# weights at their bases' real shapes in bf16 under a 15 GiB ceiling (every arm built, every stage stepped, a part
# of its tensors where the whole training state would not fit, every manifest read at every loop, every claim
# judged), and what `ledger init` writes for SmolLM2-135M-Instruct dry-run on its real weights with each template.
# CI runs the same protocols at narrow widths and checks the SmolLM2 protocols without the dry run. The tests run
# one at a time, each printing its time. It installs what is missing first, as `bash tests/run.sh` does.
# Exit 0 every check passed, 1 one failed, 2 the set-up failed.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    "" | --) ;;
    *) echo "release_check.sh: unknown option $1 (pytest's options go after --)" >&2; exit 2 ;;
esac
exec bash tests/run.sh --release "$@"
