"""Where each arm's last loop lands on the sentence rows: the answer, the first hop, the start, another name.

For every arm's last checkpoint and every depth, the final-loop predictions on the development rows are sorted by
what they name in the row's chain (path[0] is the start, path[1] the first hop, path[depth] the answer). The rows
are rebuilt from the protocol (they are deterministic), the predictions read from its ledger:

python docs/results/surfaces-tiny-reentry-tuning/where_loops_land.py protocols/surfaces-tiny-reentry-tuning.yaml \
    sqlite:///runs/surfaces-reentry.db
"""

import sys
from collections import Counter
from pathlib import Path

from ledger.protocol.loader import load_protocol
from ledger.rows.builder import build_manifests, files_to_come
from ledger.store import open_store

protocol = load_protocol(Path(sys.argv[1]))
rows = {
    row.row_id: row
    for manifest in build_manifests(protocol, leave_out=files_to_come(protocol)).values()
    for row in manifest.rows
}
readings = open_store(sys.argv[2]).query(
    "SELECT f.arm, f.row_id, f.depth, f.prediction FROM v_final_readings f "
    "JOIN checkpoints c ON c.sha256 = f.checkpoint_sha256 "
    "WHERE c.id = (SELECT MAX(c2.id) FROM checkpoints c2 WHERE c2.arm = f.arm) ORDER BY f.arm, f.depth"
)
landings: dict[tuple[str, int], Counter] = {}
for arm, row_id, depth, prediction in readings.rows:
    row = rows[row_id]
    if prediction == row.answer:
        where = "answer"
    elif prediction == row.path[1]:
        where = "first hop"
    elif prediction == row.path[0]:
        where = "start"
    elif prediction in row.path:
        where = "another hop"
    else:
        where = "off the chain"
    landings.setdefault((arm, depth), Counter())[where] += 1
kinds = ["answer", "first hop", "start", "another hop", "off the chain"]
print("arm,depth,rows," + ",".join(kind.replace(" ", "_") for kind in kinds))
for (arm, depth), counts in sorted(landings.items()):
    print(f"{arm},{depth},{sum(counts.values())}," + ",".join(str(counts[kind]) for kind in kinds))
