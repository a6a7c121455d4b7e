"""``ledger report``: a self-contained HTML report (plus PNG figures) read from the store alone.

    from ledger.report.html import write_report, report_for_protocol_name
    write_report(store, (protocol_sha,), Path("report"), title="Phase A", support_depths=(1, 8))
    report_for_protocol_name(store, "phaseA", Path("report"))   # shas, support and claims by name

Everything is scoped to the given protocol (or imported release) SHA-256s (see
``ledger.report.data``). Nothing comes from memory or from files other than the ledger
database. The report leads with what a reader opens it for:

1. the claims: each one's first recorded outcome, the statistic in plain words, what it found, and the paper's
   finding beside it (replicated or departed), under the tally;
2. per-depth final accuracy of every arm on each rule-chasing manifest (evaluation manifests first, then the
   development ones), with Wilson 95% intervals and the training support range shaded;
3. every arm's training loss, stage after stage;
4. a per-loop active-label heatmap for each recurrent arm (loop <= depth cells);
5. accuracy against median latency per depth (arms that recorded latency);
6. design M's test-recurrence sweeps and training FLOPs;
7. every registered version side by side, the checkpoint lineage with its gates, the environment;
8. the protocols: their SHA-256s, descriptions, arms and recorded deviations.

The output is deterministic: the same ledger head gives the same HTML and (with the same
matplotlib) the same PNG bytes. No wall-clock time is written anywhere. This module never
imports torch, and matplotlib only once figures are drawn (``ledger.report.figures``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ledger.audit.history import protocol_history, version_story
from ledger.report.claim_effects import claim_effect
from ledger.report.data import (
    ArmSeries,
    ClaimRow,
    DepthPoint,
    HeatmapGrid,
    LineageNode,
    StageLosses,
    accuracy_series,
    active_label_grid,
    claim_rows,
    grid_of,
    lineage_nodes,
    manifest_names_of_role,
    resolve_protocol,
    rule_chasing_manifests,
    run_environments,
    scoped_readings,
    series_of,
    support_depths_of,
    training_losses,
)
from ledger.report.figures import (
    FRONTIER_BAR,
    accuracy_figure,
    claims_figure,
    figure_style,
    heatmap_figure,
    latency_figure,
    loss_figure,
    series_colors,
)
from ledger.report.sections import (
    CSS,
    accuracy_table,
    claims_html,
    environment_html,
    esc,
    heatmap_table,
    history_html,
    img,
    lineage_html,
    slug,
)
from ledger.report.sweeps import sweeps_html
from ledger.store import Store

__all__ = [
    "ArmSeries",
    "ClaimRow",
    "DepthPoint",
    "HeatmapGrid",
    "LineageNode",
    "accuracy_series",
    "active_label_grid",
    "claim_rows",
    "lineage_nodes",
    "report_for_protocol_name",
    "resolve_protocol",
    "rule_chasing_manifests",
    "support_depths_of",
    "write_report",
]


def report_for_protocol_name(
    store: Store, name: str, out_dir: str | Path, *, title: str | None = None, version: str | None = None
) -> Path:
    """``write_report`` for every registered version of protocol (or release) ``name`` (or only ``version``:
    its runs and the claims its registration preregistered), with the training support read from the
    registered protocol."""
    shas, support = resolve_protocol(store, name, version)
    default_title = f"{name}: ledger report" if version is None else f"{name} version {version}: ledger report"
    return write_report(
        store,
        shas,
        Path(out_dir),
        title=title or default_title,
        support_depths=support,
        claim_prefix=name if version is None else None,
    )


def _description(protocol) -> str:
    """The registered description (where a protocol states its deviations from the paper), if any."""
    try:
        return str(json.loads(protocol.canonical_json).get("description") or "")
    except (ValueError, AttributeError):
        return ""


def _arms(protocol) -> str:
    """Every arm of the registered protocol with its design: surgery, bridge and re-entry (the paper's or not),
    budget; read from the registered canonical form, so the report says what ran, not what a file says now."""
    from ledger.protocol.protocol import Protocol

    try:
        registered = Protocol.model_validate(json.loads(protocol.canonical_json))
    except (ValueError, AttributeError):
        return ""
    items = "".join(
        f"<li><code>{esc(arm.id)}</code> ({esc(arm.kind)}, base <code>{esc(arm.base)}</code>): {esc(arm.design())}</li>"
        for arm in registered.arms
    )
    return f'<br><span class="note">arms:</span><ul class="arms">{items}</ul>' if items else ""


def _deviations(store: Store, protocol) -> str:
    """The recorded deviations that led to this version: from which version, when, why, which items."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for deviation in store.deviations_to(protocol.sha256):
        grouped.setdefault((deviation.protocol_sha256, deviation.timing, deviation.reason), []).append(deviation.item)
    return "".join(
        f'<br><span class="note">Recorded deviation from <code>{esc(before[:12])}</code> ({esc(timing)}): '
        f"{esc(reason)} Items: {esc(', '.join(items))}.</span>"
        for (before, timing, reason), items in grouped.items()
    )


def write_report(
    store: Store,
    protocol_sha256s: tuple[str, ...],
    out_dir: Path,
    *,
    title: str,
    support_depths: tuple[int, int] | None = None,
    claim_prefix: str | None = None,
) -> Path:
    """Write ``out_dir/report.html`` and its PNG figures under ``out_dir/figures/``; returns the HTML path.

    Existing files of the same names are overwritten; other files in ``out_dir`` are left alone.
    """
    shas = tuple(protocol_sha256s)
    out_dir = Path(out_dir)
    figures_dir = out_dir / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    if not shas:
        raise ValueError("give at least one protocol sha256")
    protocols = store.protocols(sha256s=shas)
    known = {protocol.sha256 for protocol in protocols}
    missing = [sha for sha in shas if sha not in known]
    if missing:
        raise LookupError(f"protocol sha256 {missing[0]} is not registered in this ledger")
    root, size = store.head()

    manifests = _evaluation_first(store, shas, rule_chasing_manifests(store, shas))
    evidence = {m.sha256: scoped_readings(store, shas, m.sha256) for m in manifests}
    per_manifest = [(m, series_of(evidence[m.sha256])) for m in manifests]
    labels = sorted({s.label for _, series in per_manifest for s in series})
    colors = series_colors(labels)

    body: list[str] = []
    # 1. claims: what a reader opens the report for
    rows = claim_rows(store, shas, claim_prefix)
    evaluated = sum(1 for row in rows if row.outcome is not None)
    body.append('<section id="claims"><h2>1. Claims</h2>')
    body.append(
        f'<p class="note">{len(rows)} claims registered for these protocols, {evaluated} evaluated. Each shows its '
        "first recorded outcome (the smallest claim_outcomes id), what its statistic found, the paper's finding "
        "beside it, and the figures and p-value recorded with it.</p>"
    )
    with figure_style():
        body.append(_claims_picture(out_dir, rows, per_manifest, support_depths, colors))
    arms_by_protocol: dict[str, dict[str, dict]] = {}
    for protocol in store.protocols(sha256s=shas):
        by_id = arms_by_protocol.setdefault(protocol.sha256, {})
        for arm in json.loads(protocol.canonical_json).get("arms") or []:
            by_id[str(arm.get("id"))] = arm
            by_id.setdefault(str((arm.get("replicate") or {}).get("of") or arm.get("id")), arm)  # seeds: as written
    body.append(claims_html(rows, arms_by_protocol))
    body.append("</section>")

    with figure_style():
        # 2. accuracy per depth
        body.append('<section id="accuracy"><h2>2. Per-depth final accuracy</h2>')
        body.append(
            '<p class="note">Final reading of each row: its evidence at loop = row depth (a recurrent arm at forced '
            "depth), or at loop 0 for an arm read once; cells with no single right answer (correct NULL) are left "
            "out. Error bars: Wilson 95% intervals. Evaluation manifests first, then the development ones. "
            + (
                f"Shaded: training support, depth {support_depths[0]}-{support_depths[1]}. "
                if support_depths
                else "No training support range was given, so nothing is shaded. "
            )
            + f"Dashed: the {FRONTIER_BAR} frontier bar.</p>"
        )
        if not manifests:
            body.append('<p class="note">No rule-chasing evaluation manifest of these protocols holds evidence.</p>')
        for manifest, series in per_manifest:
            name = manifest.name
            file = f"figures/accuracy-{slug(name)}-{manifest.sha256[:8]}.png"
            plotted = [s for s in series if s.points]
            body.append(
                f'<h3 id="accuracy-{esc(slug(name))}">Manifest <code>{esc(name)}</code> '
                f'<span class="note sha">{esc(manifest.sha256[:12])}, {manifest.n_rows} rows</span></h3>'
            )
            if not plotted:
                body.append('<p class="note">No arm has a final reading on this manifest.</p>')
                continue
            accuracy_figure(out_dir / file, name, plotted, support_depths, colors)
            arms = ", ".join(s.label for s in plotted)
            body.append(
                img(
                    file,
                    f"per-depth accuracy on {name}",
                    f"Per-depth final accuracy on <code>{esc(name)}</code>, one line per arm: {esc(arms)}.",
                )
            )
            body.append(accuracy_table(name, series))
        body.append("</section>")

        # 3. training loss
        body.append(_training_section(out_dir, training_losses(store, shas)))

        # 4. active-label heatmaps
        body.append('<section id="heatmaps"><h2>4. Per-loop active-label accuracy (recurrent arms)</h2>')
        body.append(
            '<p class="note">Rows: row depth; columns: loop t. Value: share of cells whose decoded state is the t-th '
            "intermediate symbol (evidence.correct at that loop), for loop t &le; depth. Grey/blank: loop above the "
            "row's depth (no single right answer) or not measured.</p>"
        )
        any_heatmap = False
        for manifest, series in per_manifest:
            for s in series:
                if not s.recurrent:
                    continue
                grid = grid_of(evidence[manifest.sha256], s.arm, s.checkpoint_sha256)
                if grid is None:
                    continue
                any_heatmap = True
                file = f"figures/heatmap-{slug(manifest.name)}-{slug(s.arm)}-{s.checkpoint_sha256[:8]}.png"
                heatmap_figure(out_dir / file, manifest.name, grid)
                body.append(f"<h3>Arm <code>{esc(s.label)}</code> on <code>{esc(manifest.name)}</code></h3>")
                body.append(
                    img(
                        file,
                        f"active-label heatmap of arm {s.label} on {manifest.name}",
                        f"Active-label accuracy (%) of arm {esc(s.label)} by depth and loop on "
                        f"<code>{esc(manifest.name)}</code>.",
                    )
                )
                body.append(heatmap_table(grid))
        if not any_heatmap:
            body.append('<p class="note">No recurrent arm (evidence at loop &ge; 1) on these manifests.</p>')
        body.append("</section>")

        # 5. accuracy vs latency
        body.append('<section id="latency"><h2>5. Accuracy vs latency per depth</h2>')
        body.append(
            '<p class="note">x: median latency_ms of the final readings of an arm at a depth (rows with a '
            "recorded latency only); y: final accuracy at that depth. Point labels: depth.</p>"
        )
        for manifest, series in per_manifest:
            name = manifest.name
            plotted = [s for s in series if s.points]
            with_latency = [s for s in plotted if s.has_latency]
            without = [s.label for s in plotted if not s.has_latency]
            body.append(f"<h3>Manifest <code>{esc(name)}</code></h3>")
            if with_latency:
                file = f"figures/latency-{slug(name)}-{manifest.sha256[:8]}.png"
                latency_figure(out_dir / file, name, with_latency, colors)
                body.append(
                    img(
                        file,
                        f"accuracy vs latency on {name}",
                        f"Accuracy vs median latency per depth on <code>{esc(name)}</code>: "
                        f"{esc(', '.join(s.label for s in with_latency))}.",
                    )
                )
            if without:
                body.append(
                    f'<p class="note latency-skipped">No latency recorded (not plotted) for: '
                    f"{esc(', '.join(without))}.</p>"
                )
        if not per_manifest:
            body.append('<p class="note">No manifest to plot.</p>')
        body.append("</section>")

    # 6. design M: test-recurrence sweeps and training FLOPs
    body.append('<section id="sweeps"><h2>6. Test-recurrence sweeps and training FLOPs</h2>')
    body.append(
        '<p class="note">Text manifests: next-token loss (nats per token, summed over every document and divided '
        "by its tokens) of each arm's latest checkpoint at every test recurrence; word problems: accuracy at every "
        "test recurrence. Then every checkpoint's training record: its steps, realised mean recurrence, tokens, "
        "FLOPs by the seed's rule ((6 N1 + 2 N2) D; 6 N D at fixed depth) and the FLOPs of its whole lineage.</p>"
    )
    body.append(sweeps_html(store, shas))
    body.append("</section>")

    # 7. every registered version side by side
    names = sorted({protocol.name for protocol in protocols if not protocol.is_release})
    if names:
        body.append('<section id="versions"><h2>7. Every registered version</h2>')
        body.append(
            '<p class="note">Each registered version of the protocol, in registration order: the recorded deviations '
            "that led to it, the rows its runs read, each preregistered claim's outcome re-derived from that "
            "version's evidence alone, and the exploratory (tuning) protocols registered in this ledger before it. "
            "A claim supported only in a later version is shown next to the versions where it was not.</p>"
        )
        body.extend(history_html(protocol_history(store, name)) for name in names)
        body.append("</section>")

    # 8. lineage
    body.append('<section id="lineage"><h2>8. Checkpoint lineage</h2>')
    body.append(
        '<p class="note">Checkpoints of these protocols\' runs and their ancestors, nested under their '
        "parents, with status and the gate results recorded with them (value, comparison, threshold, "
        "action).</p>"
    )
    body.append(lineage_html(lineage_nodes(store, shas)))
    body.append("</section>")

    # 9. environment
    body.append('<section id="environment"><h2>9. Environment</h2>')
    body.append(
        '<p class="note">What each run recorded of the code and machine it ran on: the project\'s git commit '
        "(and whether its tree was dirty), package versions (every installed distribution is recorded) and the "
        "lock they match, torch's CPU capability and BLAS, the device, its name and the dtype, the threads. Runs "
        "with the same environment share a row; below the table, how each other row differs from the first "
        "(another CPU capability or thread count can move every float: <code>ledger compare</code> says where).</p>"
    )
    body.append(environment_html(run_environments(store, shas)))
    body.append("</section>")

    protocol_items = "".join(
        f"<li><code>{esc(protocol.sha256)}</code> — {esc(protocol.name)} (version {esc(protocol.version or '—')})"
        + (f'<br><span class="note">{esc(described)}</span>' if (described := _description(protocol)) else "")
        + _arms(protocol)
        + _deviations(store, protocol)
        + "</li>"
        for protocol in protocols
    )
    named = ", ".join(
        f"{esc(protocol.name)} version {esc(protocol.version or '—')} (<code>{esc(protocol.sha256[:12])}</code>)"
        for protocol in protocols
    )
    # how many versions were registered, and what outcome led to each deviation: on the first screen
    stories = [version_story(store, protocol.name, protocol.sha256) for protocol in protocols]
    story = "".join(
        f'<p class="versions">{esc(lines[0])}'
        + (f":</p><ul>{''.join(f'<li>{esc(line)}</li>' for line in lines[1:])}</ul>" if lines[1:] else ".</p>")
        for lines in stories
        if lines
    )
    # the header is one screen line or two; what each protocol is (description, arms, deviations) on request
    header = (
        f"<header><h1>{esc(title)}</h1>"
        f'<p>{named}. Ledger head: root <code class="head-root">{esc(root)}</code>, '
        f'size <code class="head-size">{size}</code>.</p>{story}'
        f"<details><summary>The protocols: SHA-256, description, arms and recorded deviations</summary>"
        f'<ul class="protocols">{protocol_items}</ul>'
        '<p class="note">Generated by <code>ledger report</code> from the ledger database alone: every figure and '
        "table is computed from the stored rows (evidence, claims, claim outcomes, checkpoints, gate results) "
        "scoped to the SHA-256s above. Re-running it on a ledger with the same head yields the same report; check "
        "the head with <code>ledger head</code> / <code>ledger verify --since-head ROOT SIZE</code>.</p>"
        "</details></header>"
    )
    document = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>\n"
        + header
        + "\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
    path = out_dir / "report.html"
    path.write_text(document, encoding="utf-8")
    return path


def _evaluation_first(store: Store, shas: tuple[str, ...], manifests: list) -> list:
    """The manifests with those a protocol declares with role ``eval`` first, each group in registration order
    (the frozen rows a claim is judged on before the development rows a gate reads)."""
    evaluation = manifest_names_of_role(store, shas, "eval")
    first = [m for m in manifests if (m.protocol_sha256, m.name) in evaluation]
    return first + [m for m in manifests if m not in first]


def _claims_picture(out_dir: Path, rows: list, per_manifest: list, support_depths, colors: dict) -> str:
    """What leads the report: each claim's effect and interval against its bar beside the paper's figure, and
    every arm's per-depth accuracy on the first evaluation manifest with the training support shaded."""
    effects = [
        effect
        for row in rows
        if row.outcome is not None
        and (effect := claim_effect(row.claim_id, row.spec, row.detail.get("figures") or {}, row.outcome.outcome))
    ]
    parts = []
    if effects:
        file = "figures/claims-forest.png"
        claims_figure(out_dir / file, effects)
        left_out = sum(1 for row in rows if row.outcome is not None) - len(effects)
        parts.append(
            img(
                file,
                "claims: effect and interval against the bar",
                f"Each claim with an effect size: its first recorded figure (green supported, red refuted, grey "
                f"otherwise), its 95% interval and its bar (black tick; the arrow points to where the claim holds), "
                f"with the paper's figure beside it. {left_out} evaluated claims without an effect size (gates, "
                "pass/fail rules) are in the table only.",
            )
        )
    plotted = next(
        ((m, [s for s in series if s.points]) for m, series in per_manifest if any(s.points for s in series)), None
    )
    if plotted is not None:
        manifest, series = plotted
        file = f"figures/accuracy-{slug(manifest.name)}-{manifest.sha256[:8]}.png"
        accuracy_figure(out_dir / file, manifest.name, series, support_depths, colors)  # section 2 shows it again
        parts.append(
            img(
                file,
                f"leading per-depth accuracy on {manifest.name}",
                f"Every arm's per-depth final accuracy on <code>{esc(manifest.name)}</code> (Wilson 95% intervals), "
                "the training support shaded: the tables below and section 2 give every manifest.",
            )
        )
    return "".join(parts)


def _training_section(out_dir: Path, arms: dict[str, list[StageLosses]]) -> str:
    """Section 3: every arm's recorded per-step training loss, its stages one after another."""
    parts = ['<section id="training"><h2>3. Training loss</h2>']
    parts.append(
        '<p class="note">Each step\'s training loss as the run recorded it with each checkpoint (the mean over the '
        "ranks of a data-parallel run), every stage of an arm one after another; a dotted line where a stage "
        "begins.</p>"
    )
    if not arms:
        parts.append('<p class="note">No checkpoint of these protocols records a training step.</p>')
    for arm, spans in arms.items():
        file = f"figures/loss-{slug(arm)}.png"
        loss_figure(out_dir / file, arm, spans)
        stages = list(dict.fromkeys(span.stage.split("@")[0] for span in spans))
        steps = sum(len(span.losses) for span in spans)
        last = spans[-1].losses[-1]
        parts.append(
            img(
                file,
                f"training loss of arm {arm}",
                f"Training loss of arm <code>{esc(arm)}</code>: {steps} steps over stages "
                f"{esc(', '.join(stages))}; last step {last:.4g}.",
            )
        )
    parts.append("</section>")
    return "".join(parts)
