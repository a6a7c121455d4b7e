"""Per-depth correct counts of the record's arms, read from its ledger (the figures its README quotes).

python docs/results/phaseA-smollm2/per_depth.py sqlite:///runs/phaseA-smollm2/ledger.db
"""

import sys

from ledger.store import open_store

store = open_store(sys.argv[1])
rows = store.query(
    "SELECT arm, manifest, depth, loop, n, correct FROM v_accuracy_by_arm_depth "
    "WHERE manifest IN ('phaseA_eval', 'dev') ORDER BY manifest, arm, depth, loop"
)
final: dict = {}
for arm, manifest, depth, _loop, n, correct in rows.rows:
    # the last loop each row was read at: its own depth for a recurrent arm (forced), the one reading of a dense arm;
    # dev rows are the installation gate's (depth 1-4, the active label at loop = depth)
    if not (manifest == "dev" and depth > 4):
        final[(manifest, arm, depth)] = f"{correct}/{n}"
curves: dict = {}
for (manifest, arm, _depth), count in sorted(final.items()):
    curves.setdefault((manifest, arm), []).append(count)
for (manifest, arm), counts in sorted(curves.items()):
    print(f"{manifest:12} {arm:9} " + " ".join(counts))
