"""The report's HTML fragments: tables, the lineage tree, the claims table, number formats.

Pure functions of the report's data (``ledger.report.data``); every value is escaped.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping
from typing import Any

from ledger.audit.history import ProtocolHistory
from ledger.audit.verdicts import TalliedClaim, Tally
from ledger.environment import environment_differences
from ledger.judge.claim_rules import not_counted_as_declared
from ledger.protocol.arms import claim_departures
from ledger.report.data import ArmSeries, ClaimRow, HeatmapGrid, LineageNode

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #1b1b1b; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
h3 { margin-top: 1.5em; }
code, .sha { font-family: "SFMono-Regular", Menlo, Consolas, monospace; font-size: 0.88em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.86em; }
th, td { border: 1px solid #d0d0d0; padding: 0.25em 0.5em; vertical-align: top; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.blank { background: #dcdcdc; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #e4e4e4; }
figcaption { font-size: 0.88em; color: #444; }
.outcome-supported { color: #116611; font-weight: 600; }
.outcome-refuted { color: #aa1111; font-weight: 600; }
.outcome-unverifiable { color: #aa6600; font-weight: 600; }
.outcome-none { color: #777; font-style: italic; }
.status { padding: 0 0.35em; border-radius: 3px; font-size: 0.85em; }
.status-promoted { background: #d8f0d8; }
.status-exploratory { background: #f6ecc8; }
.status-failed { background: #f6d0d0; }
.gate-pass { color: #116611; }
.gate-fail { color: #aa1111; font-weight: 600; }
ul.lineage, ul.lineage ul { list-style: none; padding-left: 1.4em; border-left: 1px dotted #bbb; }
ul.lineage li { margin: 0.3em 0; }
.note { color: #555; font-size: 0.9em; }
details summary { cursor: pointer; color: #335; }
"""


def slug(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return value[:60] or "x"


def esc(value: Any) -> str:
    """HTML-escaped text of a value (None is empty)."""
    return html.escape("" if value is None else str(value), quote=True)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3g}"
        return f"{value:.4g}"
    return str(value)


def _fmt_p(p: Any, detail: dict) -> str:
    if p is None:
        return "—"
    if isinstance(p, (int, float)) and p == 0:
        log10 = (detail.get("figures") or {}).get("log10_p")
        return f"10^{log10:.2f}" if isinstance(log10, (int, float)) else "< 1e-308"
    return _fmt(float(p))


def _figures_html(figures: dict) -> str:
    scalars = [(k, v) for k, v in sorted(figures.items()) if not isinstance(v, (dict, list))]
    nested = [(k, v) for k, v in sorted(figures.items()) if isinstance(v, (dict, list))]
    parts = []
    if scalars:
        parts.append("<br>".join(f"{esc(k)} = {esc(_fmt(v))}" for k, v in scalars))
    for key, value in nested:
        if isinstance(value, dict):
            items = sorted(value.items(), key=lambda kv: (int(kv[0]) if str(kv[0]).isdigit() else math.inf, str(kv[0])))
            body = ", ".join(f"{esc(k)}: {esc(_fmt(v))}" for k, v in items)
        else:
            body = ", ".join(esc(_fmt(v)) for v in value)
        parts.append(f"<details><summary>{esc(key)}</summary>{body}</details>")
    return "".join(parts) or "—"


def img(src: str, alt: str, caption: str) -> str:
    return f'<figure><img src="{esc(src)}" alt="{esc(alt)}"><figcaption>{caption}</figcaption></figure>'


def accuracy_table(manifest: str, series: list[ArmSeries]) -> str:
    depths = sorted({p.depth for s in series for p in s.points})
    head = "".join(f"<th>{d}</th>" for d in depths)
    lines = [
        f'<table class="depth-accuracy" data-manifest="{esc(manifest)}"><tr><th>arm</th><th>checkpoint</th>'
        f"<th>correct / n</th>{head}</tr>"
    ]
    for s in series:
        if not s.points:
            continue
        by_depth = {p.depth: p for p in s.points}
        total_n = sum(p.n for p in s.points)
        total_correct = sum(p.correct for p in s.points)
        cells = []
        for d in depths:
            p = by_depth.get(d)
            if p is None:
                cells.append('<td class="blank"></td>')
            else:
                cells.append(
                    f'<td class="num" title="{p.correct}/{p.n}; Wilson 95% {p.low:.3f}-{p.high:.3f}">'
                    f"{100 * p.accuracy:.1f}</td>"
                )
        lines.append(
            f'<tr data-arm="{esc(s.arm)}"><td>{esc(s.label)}</td><td class="sha">{esc(s.checkpoint_sha256[:12])}</td>'
            f'<td class="num">{total_correct} / {total_n}</td>{"".join(cells)}</tr>'
        )
    lines.append("</table>")
    return "".join(lines)


def heatmap_table(grid: HeatmapGrid) -> str:
    head = "".join(f"<th>t={loop}</th>" for loop in grid.loops)
    lines = [
        f'<table class="heatmap" data-arm="{esc(grid.arm)}" data-checkpoint="{esc(grid.checkpoint_sha256)}">'
        f"<tr><th>depth</th>{head}</tr>"
    ]
    for depth, values, counts in zip(grid.depths, grid.values, grid.counts):
        cells = []
        for loop, value, count in zip(grid.loops, values, counts):
            if value is None:
                kind = "above-diagonal" if loop > depth else "unmeasured"
                cells.append(f'<td class="blank" data-loop="{loop}" data-cell="{kind}"></td>')
            else:
                cells.append(
                    f'<td class="num" data-loop="{loop}" data-cell="active" title="n={count}">{100 * value:.1f}</td>'
                )
        lines.append(f'<tr data-depth="{depth}"><th>{depth}</th>{"".join(cells)}</tr>')
    lines.append("</table>")
    return "".join(lines)


def lineage_html(nodes: list[LineageNode]) -> str:
    if not nodes:
        return '<p class="note">No checkpoints are recorded for these runs.</p>'
    by_sha = {node.checkpoint.sha256: node for node in nodes}
    children: dict[str | None, list[LineageNode]] = {}
    for node in nodes:
        parent = node.checkpoint.parent_sha256 if node.checkpoint.parent_sha256 in by_sha else None
        children.setdefault(parent, []).append(node)

    def render(node: LineageNode) -> str:
        checkpoint = node.checkpoint
        status = checkpoint.status
        bits = [
            f'<code class="sha" title="{esc(checkpoint.sha256)}">{esc(checkpoint.sha256[:12])}</code>',
            f"arm <b>{esc(checkpoint.arm)}</b>",
        ]
        if checkpoint.stage:
            bits.append(f"stage {esc(checkpoint.stage)}")
        bits.append(f'<span class="status status-{esc(status)}">{esc(status)}</span>')
        if not node.in_scope:
            bits.append('<span class="note">(ancestor, not produced by a run of these protocols)</span>')
        if checkpoint.path:
            bits.append(f'<span class="note">{esc(checkpoint.path)}</span>')
        gates = ""
        if node.gates:
            items = []
            for gate in node.gates:
                verdict = "passed" if gate.passed else "FAILED"
                measured = ""
                if gate.value is not None or gate.threshold is not None:
                    measured = (
                        f": {esc(gate.metric or 'value')} {esc(_fmt(gate.value))} "
                        f"{esc(gate.comparison or 'vs')} {esc(_fmt(gate.threshold))}"
                    )
                items.append(
                    f'<li class="gate" data-gate="{esc(gate.gate)}">gate <b>{esc(gate.gate)}</b>{measured} — '
                    f'<span class="{"gate-pass" if gate.passed else "gate-fail"}">{verdict}</span> '
                    f"(action {esc(gate.action)})</li>"
                )
            gates = f'<ul class="gates">{"".join(items)}</ul>'
        nested = "".join(render(child) for child in children.get(checkpoint.sha256, []))
        nested_html = f"<ul>{nested}</ul>" if nested else ""
        return (
            f'<li class="checkpoint" data-sha="{esc(checkpoint.sha256)}" data-status="{esc(status)}">'
            f"{' · '.join(bits)}{gates}{nested_html}</li>"
        )

    roots = children.get(None, [])
    return f'<ul class="lineage">{"".join(render(node) for node in roots)}</ul>'


def _tallied(row: ClaimRow, arms: Mapping[str, dict]) -> TalliedClaim:
    spec = row.spec
    subjects = list(spec.get("arms") or []) + ([spec["arm"]] if spec.get("arm") else [])
    return TalliedClaim(
        row.claim_id.split("/")[-1],
        row.outcome.outcome if row.outcome else None,
        spec.get("paper") or None,
        not_counted_as_declared(spec.get("by_construction"), bool(spec.get("exploratory"))),
        claim_departures(subjects, arms),
    )


def claims_html(rows: list[ClaimRow], arms: Mapping[str, Mapping[str, dict]] | None = None) -> str:
    """The claims table under its tally; ``arms``: protocol SHA-256 -> arm id -> spec, so that the tally counts
    the claims on arms that depart from the paper's design apart (a variant), as verify does."""
    if not rows:
        return '<p class="note">No claims are registered for these protocols.</p>'
    tally = Tally.of_claims([_tallied(row, (arms or {}).get(row.protocol_sha256 or "", {})) for row in rows]).line()
    lines = [
        f'<p class="tally">{esc(tally)}</p>'
        '<table class="claims"><tr><th>claim</th><th>statement</th><th>first outcome</th><th>what it found</th>'
        "<th>the paper</th><th>statistic</th><th>figures</th><th>p-value</th></tr>"
    ]
    for row in rows:
        outcome = row.outcome
        paper_finding = row.spec.get("paper")
        if not paper_finding:
            paper = "—"
        else:
            where = f" ({paper_finding['where']})" if paper_finding.get("where") else ""
            state = (
                ""
                if outcome is None or outcome.outcome not in ("supported", "refuted")
                else ("replicates: " if outcome.outcome == paper_finding["outcome"] else "departs: ")
            )
            paper = esc(f"{state}{paper_finding['outcome']}, {paper_finding['figure']}{where}")
        if outcome is None:
            verdict = '<span class="outcome-none">not evaluated</span>'
            reason = figures = p_value = "—"
        else:
            verdict = f'<span class="outcome-{esc(outcome.outcome)}">{esc(outcome.outcome)}</span>'
            if row.n_evaluations > 1:
                verdict += f'<br><span class="note">{row.n_evaluations} evaluations'
                if row.latest_outcome != outcome.outcome:
                    verdict += f"; latest: {esc(row.latest_outcome)}"
                verdict += "</span>"
            reason = esc(outcome.reason)
            figures = _figures_html(row.detail.get("figures") or {})
            p_value = esc(_fmt_p(row.p_value, row.detail))
        shown = outcome.outcome if outcome else "not evaluated"
        lines.append(
            f'<tr class="claim" data-claim="{esc(row.claim_id)}" data-outcome="{esc(shown)}">'
            f"<td><code>{esc(row.claim_id)}</code></td><td>{esc(row.statement)}</td><td>{verdict}</td>"
            f"<td>{reason}</td><td>{paper}</td><td>{_statistic_words(row.statistic)}</td>"
            f'<td>{figures}</td><td class="num">{p_value}</td></tr>'
        )
    lines.append("</table>")
    return "".join(lines)


def _statistic_words(statistic: str) -> str:
    """A claim's statistic in plain words (its kind's summary), its name below."""
    from ledger.protocol.claims import STATISTICS

    summary = STATISTICS[statistic].summary if statistic in STATISTICS else ""
    name = f'<br><span class="note"><code>{esc(statistic)}</code></span>'
    return (esc(summary) + name) if summary else f"<code>{esc(statistic)}</code>"


def environment_html(environments: list[tuple[list[str], dict]]) -> str:
    if not environments:
        return '<p class="note">No runs of these protocols are recorded (an imported release records none).</p>'
    lines = [
        '<table class="environment"><tr><th>runs</th><th>git commit</th><th>device</th><th>dtype</th>'
        "<th>packages</th><th>lock</th><th>CPU capability, BLAS</th><th>CUDA / cuDNN</th><th>python, threads</th></tr>"
    ]
    for runs, env in environments:
        git = env.get("git") or {}
        commit = (
            f"{git['commit'][:12]}{' (dirty)' if git.get('dirty') else ''}" if git.get("commit") else "not a git tree"
        )
        packages = env.get("packages") or {"torch": env.get("torch")}
        versions = ", ".join(f"{name} {version}" for name, version in packages.items() if version)
        if env.get("distributions"):
            versions += f" ({len(env['distributions'])} distributions recorded)"
        device = " ".join(str(part) for part in (env.get("device"), env.get("device_name")) if part) or "not recorded"
        cuda = f"{env.get('cuda') or '-'} / {env.get('cudnn') or '-'}"
        lock = env.get("lock")
        if isinstance(lock, dict):
            unmet = f", unmet: {'; '.join(lock['unmet'])}" if lock.get("unmet") else ""
            lock_text = f"{lock.get('file')} {str(lock.get('sha256'))[:12]}{unmet}"
        else:
            lock_text = "not recorded" if "lock" not in env else "none (not installed from a lock)"
        build = env.get("torch_build") or {}
        cpu = ", ".join(str(build[key]) for key in ("cpu_capability", "blas") if build.get(key)) or "not recorded"
        lines.append(
            f"<tr><td>{esc(', '.join(runs))}</td><td><code>{esc(commit)}</code></td><td>{esc(device)}</td>"
            f"<td>{esc(env.get('dtype', '-'))}</td><td>{esc(versions)}</td><td><code>{esc(lock_text)}</code></td>"
            f"<td>{esc(cpu)}</td><td>{esc(cuda)}</td>"
            f"<td>{esc(env.get('python', '-'))}, {esc(env.get('threads', '-'))} threads</td></tr>"
        )
    lines.append("</table>")
    first_runs, first = environments[0]
    for runs, env in environments[1:]:
        differences = environment_differences(first, env, labels=("in the first row", "here"))
        if differences:
            items = "".join(f"<li>{esc(line)}</li>" for line in differences)
            lines.append(
                f'<p class="note">How the environment of {esc(", ".join(runs))} differs from the first row\'s '
                f'({esc(", ".join(first_runs))}):</p><ul class="environment-differences">{items}</ul>'
            )
    return "".join(lines)


def history_html(history: ProtocolHistory) -> str:
    """Every registered version of one protocol side by side: what changed, what it read, what each claim
    came to on its own evidence, and the tuning registered before it."""
    n = len(history.versions)
    items = []
    for version in history.versions:
        changed = "; ".join(f"{d.item} ({d.timing}): {d.reason}" for d in version.deviations) or "first version"
        read = "; ".join(f"{m}: {rows} rows, {readings} readings" for m, readings, rows in version.readings)
        tuning = ", ".join(f"{p.name} v{p.version}" for p in version.tuning)
        items.append(
            f"<tr><td>v{version.number} of {n}</td><td><code>{esc(version.protocol.sha256[:12])}</code></td>"
            f"<td>{esc(changed)}</td><td>{esc(read or 'no readings')}</td><td>{esc(tuning or '—')}</td>"
            f"<td>{version.supported()} of {len(version.claims)}</td></tr>"
        )
    versions = (
        "<table><tr><th>version</th><th>SHA-256</th><th>changed on the way to it</th><th>rows read</th>"
        "<th>tuning before it</th><th>claims supported</th></tr>" + "".join(items) + "</table>"
    )
    header = "".join(f"<th>v{version.number}</th>" for version in history.versions)
    claim_rows = "".join(
        f"<tr><td><code>{esc(claim)}</code></td>"
        + "".join(f"<td>{esc(version.outcome_of(claim))}</td>" for version in history.versions)
        + "</tr>"
        for claim in history.claims()
    )
    claims = f"<table><tr><th>claim</th>{header}</tr>{claim_rows}</table>" if claim_rows else ""
    return f"<h3>{esc(history.name)}</h3>{versions}{claims}"
