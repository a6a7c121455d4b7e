"""The report's design-M section: test-recurrence sweeps and the training FLOPs of every curve checkpoint.

From the ledger alone: for each text manifest, nats per token of every arm's latest checkpoint at every
test recurrence it was read at; for each word-problem manifest, accuracy at every test recurrence; and for
every checkpoint that recorded a training record, its step span, realised mean recurrence and FLOPs.
"""

from __future__ import annotations

from ledger.judge.language_claims import nats_per_token
from ledger.report.sections import esc


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{esc(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="sweep"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _latest_per_arm(readings) -> dict[str, str]:
    latest: dict[str, tuple[int, str]] = {}
    for reading in readings:
        if reading.arm not in latest or reading.entry_seq > latest[reading.arm][0]:
            latest[reading.arm] = (reading.entry_seq, reading.checkpoint_sha256)
    return {arm: checkpoint for arm, (_, checkpoint) in sorted(latest.items())}


def sweeps_html(store, shas: tuple[str, ...]) -> str:
    parts: list[str] = []
    for task, what in (("text", "nats per token"), ("word_problem", "accuracy")):
        for manifest in store.manifests_with_evidence(shas, task=task):
            readings = store.readings(manifest.sha256, protocol_sha256s=shas)
            loops = sorted({r.loop for r in readings})
            rows = []
            for arm, checkpoint in _latest_per_arm(readings).items():
                cells = [f"<code>{esc(arm)}</code>", f'<span class="sha">{esc(checkpoint[:12])}</span>']
                for loop in loops:
                    if task == "text":
                        losses = store.measured_losses(
                            manifest.sha256, arm=arm, checkpoint_sha256=checkpoint, loop=loop, protocol_sha256s=shas
                        )
                        loss = nats_per_token(losses)
                        cells.append(f"{loss:.4f}" if loss is not None else "")
                    else:
                        at = [
                            r for r in readings if r.arm == arm and r.checkpoint_sha256 == checkpoint and r.loop == loop
                        ]
                        right = sum(1 for r in at if r.correct)
                        cells.append(f"{right}/{len(at)} = {right / len(at):.3f}" if at else "")
                rows.append(cells)
            parts.append(
                f"<h3>Manifest <code>{esc(manifest.name)}</code> ({what}, by test recurrence)</h3>"
                + _table(["arm", "checkpoint", *[f"loop {loop}" for loop in loops]], rows)
            )
    curve = []
    scoped = store.checkpoints(store.checkpoints_in_scope(shas))
    metas = store.checkpoint_meta(checkpoint.sha256 for checkpoint in scoped)
    for checkpoint in scoped:
        meta = metas.get(checkpoint.sha256, {})
        if "flops" not in meta:
            continue
        span = meta.get("step_range", [0, meta.get("steps", 0)])
        curve.append(
            [
                f"<code>{esc(checkpoint.arm)}</code>",
                esc(checkpoint.stage),
                f"{span[0]}-{span[1]}",
                f"{meta['mean_recurrence']:.2f}",
                f"{meta['tokens']:,}",
                f"{meta['flops']:.4g}",
                f"{meta.get('flops_total', meta['flops']):.4g}",
            ]
        )
    if curve:
        parts.append(
            "<h3>Training FLOPs of every checkpoint</h3>"
            + _table(["arm", "stage", "steps", "mean recurrence", "tokens", "FLOPs", "lineage FLOPs"], curve)
        )
    if not parts:
        return '<p class="note">No text or word-problem manifest of these protocols holds evidence.</p>'
    return "\n".join(parts)
