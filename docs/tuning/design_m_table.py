"""Print the development-row figures of a design-M exploratory twin from its ledger, as markdown.

    python docs/tuning/design_m_table.py sqlite:///runs/designM-tiny-tuning/ledger.db designM-tiny-tuning

For every arm and recorded checkpoint: training FLOPs of its lineage, the held-out loss (nats per token,
token-weighted) on each text dev manifest and the word-problem accuracy at every test recurrence read.
Read-only: it opens the ledger and prints.
"""

from __future__ import annotations

import sys

from ledger.judge.language_claims import nats_per_token
from ledger.store import open_store
from ledger.store.evidence import StoreEvidence


def main(url: str, protocol: str) -> None:
    store = open_store(url)
    try:
        registered = [p for p in store.protocols() if p.name == protocol]
        evidence = StoreEvidence(store, tuple(p.sha256 for p in registered))
        document = registered[-1].document()
        manifests = {m["id"]: m for m in document["manifests"] if m["role"] == "dev"}
        texts = [m for m, spec in manifests.items() if spec["generator"] == "text"]
        problems = [m for m, spec in manifests.items() if spec["generator"] == "word_problems"]
        header = ["arm", "steps", "FLOPs"]
        rows = []
        for arm in document["arms"]:
            loops = arm["evaluation"].get("loops") if arm["kind"] == "recurrent" else [1]
            loops = loops if isinstance(loops, list) else [1]
            curve = evidence.curve(arm["id"], texts[0])
            meta = store.checkpoint_meta(c for c, _ in curve)
            for checkpoint, flops in curve:
                steps = meta[checkpoint]["step_range"][1]
                cells = [arm["id"], str(steps), f"{flops:.3g}"]
                for manifest in texts:
                    for loop in loops:
                        losses = evidence.losses(arm["id"], manifest, loop, checkpoint) or {}
                        value = nats_per_token(losses)
                        cells.append("-" if value is None else f"{value:.3f}")
                for manifest in problems:
                    for loop in loops:
                        found = evidence.outcomes_at(arm["id"], manifest, loop, checkpoint) or {}
                        cells.append(f"{sum(ok for _, ok in found.values())}/{len(found)}" if found else "-")
                rows.append((cells, loops))
        widest = max((loops for _, loops in rows), key=len)
        header += [f"{m} loss T={t}" for m in texts for t in widest] + [f"{m} T={t}" for m in problems for t in widest]
        print("| " + " | ".join(header) + " |")
        print("| " + " | ".join("---" for _ in header) + " |")
        for cells, loops in rows:
            if loops != widest:  # a one-pass arm: its one reading under T=1, dashes elsewhere
                per = len(widest)
                fixed, rest = cells[:3], cells[3:]
                cells = fixed + [v for value in rest for v in [value] + ["-"] * (per - 1)]
            print("| " + " | ".join(cells) + " |")
    finally:
        store.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
