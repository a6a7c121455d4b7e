"""`ledger report`: the HTML report and its figures, read from a real ledger.

The main fixture imports the split-bridge release (claims/external) into a fresh SQLite
ledger (`ledger verify --import --record`: import, verify, record every claim's first
outcome), once per module.
A second, small hand-built ledger (a registered protocol with training stages, gates,
lineage and latency) covers what the release has not: latency, lineage nesting, gates and
the training support read from the protocol.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from ledger.audit.preregistration import register
from ledger.audit.recording import import_external, record_outcomes
from ledger.audit.verify import verify
from ledger.protocol.loader import load_protocol
from ledger.report.html import (
    active_label_grid,
    report_for_protocol_name,
    resolve_protocol,
    rule_chasing_manifests,
    support_depths_of,
    write_report,
)
from ledger.rows.builder import build_manifests
from ledger.store import open_store

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RELEASE = "recurrent-qwen-svgd"
REFERENCE = ROOT.parent / "shared" / "reference" / RELEASE


# ----------------------------------------------------------------------------- HTML parsing


class _Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: _Node | None):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[_Node] = []
        self.text_parts: list[str] = []

    def text(self) -> str:
        return "".join(self.text_parts) + "".join(child.text() for child in self.children)

    def iter(self, tag: str | None = None):
        for child in self.children:
            if tag is None or child.tag == tag:
                yield child
            yield from child.iter(tag)

    def find_all(self, tag: str, **attrs: str) -> list[_Node]:
        return [
            node
            for node in self.iter(tag)
            if all(
                node.attrs.get(key.replace("_", "-") if key.startswith("data") else key) == value
                for key, value in attrs.items()
            )
        ]

    def has_class(self, name: str) -> bool:
        return name in (self.attrs.get("class") or "").split()


VOID = {"img", "br", "meta", "link", "hr", "input"}


class _TreeBuilder(HTMLParser):
    """A small DOM from html.parser: enough to walk sections, tables, lists and images."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = _Node("#root", {}, None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        node = _Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(_Node(tag, dict(attrs), self.current))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        node = self.current
        while node is not self.root and node.tag != tag:
            node = node.parent
        assert node is not self.root, f"unbalanced </{tag}>"
        self.current = node.parent

    def handle_data(self, data):
        self.current.text_parts.append(data)


def parse_html(path: Path) -> _Node:
    builder = _TreeBuilder()
    builder.feed(path.read_text(encoding="utf-8"))
    builder.close()
    assert builder.current is builder.root, "unclosed elements in the report"
    return builder.root


def section(root: _Node, section_id: str) -> _Node:
    found = [node for node in root.iter("section") if node.attrs.get("id") == section_id]
    assert len(found) == 1, f"section {section_id!r}: {len(found)} found"
    return found[0]


def figure_with_img(scope: _Node, needle: str) -> tuple[_Node, str]:
    """The <figure> whose <img alt> contains needle, and its image src."""
    for figure in scope.iter("figure"):
        images = list(figure.iter("img"))
        if images and needle in (images[0].attrs.get("alt") or ""):
            return figure, images[0].attrs["src"]
    raise AssertionError(f"no figure whose image alt contains {needle!r}")


def assert_png(path: Path) -> None:
    assert path.is_file(), f"{path} missing"
    data = path.read_bytes()
    assert len(data) > 1000 and data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"


# ----------------------------------------------------------------------------- the released ledger


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """The split-bridge release imported and its claims verified (first outcomes recorded)."""
    tmp = tmp_path_factory.mktemp("report")
    store = open_store(f"sqlite:///{tmp / 'ledger.db'}")
    assert REFERENCE.is_dir(), f"the released reference data is missing: expected it at {REFERENCE}"
    import_external(store, [ROOT / "claims/external"])
    report = verify(store, [ROOT / "claims/external"])
    assert report.exit_code == 0, report.to_dict()
    assert len(record_outcomes(store, report)) == len(report.verdicts)
    shas, support = resolve_protocol(store, RELEASE)
    assert support is None  # a release has no training stages
    html_path = write_report(
        store, shas, tmp / "out", title="Split bridge, external audit", support_depths=(1, 8), claim_prefix=RELEASE
    )
    yield store, shas, html_path
    store.close()


def test_every_image_is_a_png_next_to_the_report(released):
    _, _, html_path = released
    root = parse_html(html_path)
    sources = [img.attrs.get("src") for img in root.iter("img")]
    assert sources, "the report has no figures"
    for src in sources:
        assert src and src.startswith("figures/") and src.endswith(".png"), src
        assert_png(html_path.parent / src)
    # self-contained: no scripts, no remote resources
    assert not list(root.iter("script")) and not list(root.iter("link"))
    text = html_path.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text


def test_header_names_the_release_and_the_ledger_head(released):
    store, shas, html_path = released
    root = parse_html(html_path)
    header = next(root.iter("header"))
    assert "Split bridge, external audit" in next(header.iter("h1")).text()
    assert shas[0] in header.text()
    head_root, size = store.head()
    assert [node.text() for node in header.iter("code") if node.has_class("head-root")] == [head_root]
    assert [node.text() for node in header.iter("code") if node.has_class("head-size")] == [str(size)]


def test_per_depth_accuracy_figure_for_phase_a_names_all_five_arms(released):
    store, shas, html_path = released
    accuracy = section(parse_html(html_path), "accuracy")
    figure, src = figure_with_img(accuracy, "phaseA")
    assert_png(html_path.parent / src)
    caption = next(figure.iter("figcaption")).text()
    named = {arm.strip(" .") for arm in caption.split(":", 1)[1].split(",")}
    assert {"A", "B", "C", "D", "E"} <= named
    assert "depth 1-8" in accuracy.text()  # the training support is shaded and said so
    table = accuracy.find_all("table", data_manifest="phaseA")[0]
    rows = {tr.attrs["data-arm"]: tr for tr in table.iter("tr") if "data-arm" in tr.attrs}
    assert {"A", "B", "C", "D", "E"} <= set(rows)
    # the paper's totals, from the final readings (loop = depth for A/E, loop 0 for B/C/D)
    totals = {arm: rows[arm].children[2].text() for arm in "ABCDE"}
    assert totals == {"A": "1506 / 1792", "B": "496 / 1792", "C": "1292 / 1792", "D": "656 / 1792", "E": "1501 / 1792"}
    # ARC (multiple choice) is not a rule-chasing manifest: no per-depth figure for it
    names = {manifest.name for manifest in rule_chasing_manifests(store, shas)}
    assert names == {"phaseA", "persistence"}


def test_heatmaps_for_recurrent_arms(released):
    store, shas, html_path = released
    heatmaps = section(parse_html(html_path), "heatmaps")
    _, src = figure_with_img(heatmaps, "arm A on phaseA")
    assert_png(html_path.parent / src)
    _, src = figure_with_img(heatmaps, "arm A_anneal on persistence")
    assert_png(html_path.parent / src)
    # dense arms (read once, loop 0) get no heatmap
    assert not [img for img in heatmaps.iter("img") if "arm B " in img.attrs.get("alt", "")]

    # Arm A on phaseA: evidence only at loop = depth, so only the diagonal is filled.
    phase_a = {m.name: m.sha256 for m in rule_chasing_manifests(store, shas)}
    grid = active_label_grid(store, shas, phase_a["phaseA"], "A")
    assert grid.depths == list(range(1, 15)) and grid.loops == list(range(1, 15))
    for i, depth in enumerate(grid.depths):
        for j, loop in enumerate(grid.loops):
            assert (grid.values[i][j] is not None) == (loop == depth)
    assert grid.values[0][0] == 1.0 and grid.counts[13][13] == 128

    # A_anneal on persistence: loops 1..4 on depths 1..4, blanks above the diagonal only.
    grid = active_label_grid(store, shas, phase_a["persistence"], "A_anneal")
    assert grid.depths == [1, 2, 3, 4] and grid.loops == [1, 2, 3, 4]
    for i, depth in enumerate(grid.depths):
        for j, loop in enumerate(grid.loops):
            if loop > depth:
                assert grid.values[i][j] is None
            else:
                assert grid.values[i][j] is not None and grid.counts[i][j] == 64
    # ... and the same shape in the HTML table under the figure
    table = [t for t in heatmaps.iter("table") if t.attrs.get("data-arm") == "A_anneal"][0]
    for tr in table.iter("tr"):
        if "data-depth" not in tr.attrs:
            continue
        depth = int(tr.attrs["data-depth"])
        for td in tr.iter("td"):
            loop = int(td.attrs["data-loop"])
            expected = "above-diagonal" if loop > depth else "active"
            assert td.attrs["data-cell"] == expected
            assert (td.text().strip() == "") == (loop > depth)


def test_claims_table_has_every_claim_with_its_first_outcome(released):
    store, _, html_path = released
    claims = section(parse_html(html_path), "claims")
    rows = {tr.attrs["data-claim"]: tr for tr in claims.iter("tr") if "data-claim" in tr.attrs}
    specs = {
        f"{RELEASE}/{claim['id']}": claim
        for path in sorted((ROOT / "claims/external").glob("*.yaml"))
        for claim in yaml.safe_load(path.read_text(encoding="utf-8"))["claims"]
    }
    assert len(specs) == 33 and set(rows) == set(specs)
    for claim_id, tr in rows.items():
        first = store.first_outcome(claim_id)
        # each as the audited paper concluded: supported, or refuted for the ARC comparisons it found no difference in
        assert tr.attrs["data-outcome"] == first["outcome"] == specs[claim_id].get("audited_outcome", "supported")
        cells = [td.text() for td in tr.iter("td")]
        assert specs[claim_id]["statement"] in cells
    a_vs_b = [td.text() for td in rows[f"{RELEASE}/phaseA_A_vs_B"].iter("td")]
    assert "helped = 1048" in a_vs_b[6] and "hurt = 38" in a_vs_b[6]
    assert a_vs_b[7] == "5.72e-257"
    assert "frontier = 11.61" in [td.text() for td in rows[f"{RELEASE}/phaseA_A_frontier"].iter("td")][6]


def test_lineage_lists_every_imported_checkpoint(released):
    store, _, html_path = released
    lineage = section(parse_html(html_path), "lineage")
    listed = {li.attrs["data-sha"] for li in lineage.iter("li") if li.has_class("checkpoint")}
    recorded = {row["sha256"] for row in store.rows_of("checkpoints")}
    assert listed == recorded and len(listed) == 19


def test_report_is_deterministic(released, tmp_path):
    """Writing the report again (elsewhere) gives the same HTML and the same PNG bytes."""
    store, shas, html_path = released
    again = write_report(
        store,
        shas,
        tmp_path / "again",
        title="Split bridge, external audit",
        support_depths=(1, 8),
        claim_prefix=RELEASE,
    )
    assert again.read_bytes() == html_path.read_bytes()
    figures = sorted((html_path.parent / "figures").glob("*.png"))
    assert [png.name for png in figures] == sorted(png.name for png in (again.parent / "figures").glob("*.png"))
    for png in figures:
        assert (again.parent / "figures" / png.name).read_bytes() == png.read_bytes(), png.name


def test_report_module_does_not_import_torch():
    code = "import sys, ledger.report.html; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


# ----------------------------------------------------------------------------- a hand-built protocol

PROTOCOL = """\
name: tiny-report
version: 1
description: A small protocol with training stages, gates and latency, for the report.
seed: 11
bases:
  tiny: {source: ./weights/tiny, dtype: float32, num_layers: 4}
manifests:
  - {id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 3], rows_per_depth: 4, seed: 11, split: train}
  - {id: eval, role: eval, generator: rule_chasing, alphabet: N16, depths: [1, 4], rows_per_depth: 6, seed: 11, split: test}
arms:
  - id: A
    kind: recurrent
    base: tiny
    surgery: {split: [1, 3]}
    bridge: {kind: split}
    budget: {kind: full_block}
    stages:
      - {id: install, objective: intermediate, manifest: train, steps: 10, batch_size: 2, optimizer: {lr: 1.0e-4}, recurrence: {kind: forced}}
    evaluation: {manifests: [eval]}
  - id: B
    kind: dense
    base: tiny
    evaluation: {manifests: [eval]}
claims: [claims.yaml]
"""

CLAIMS = """\
protocol: tiny-report
correction: none
claims:
  - {id: A_accurate, statement: A is accurate on eval., statistic: accuracy, arm: A, manifest: eval, threshold: 0.5}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny")
    (tmp / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    store = open_store(f"sqlite:///{tmp / 'ledger.db'}")
    register(store, tmp / "protocol.yaml")
    protocol = load_protocol(tmp / "protocol.yaml")
    manifest = build_manifests(protocol)["eval"]
    sha = protocol.sha256
    base = store.add_checkpoint(sha256="b" * 64, arm="base", status="promoted", stage="base")
    train_run = store.add_run(run_id="train-A", kind="train", protocol_sha256=sha, arm="A")
    installed = store.add_checkpoint(
        sha256="1" * 64,
        arm="A",
        status="promoted",
        parent_sha256=base,
        run_id=train_run,
        stage="install",
        gate_results=[
            {
                "gate": "installation",
                "passed": True,
                "metric": "active_label_accuracy",
                "value": 0.95,
                "threshold": 0.9,
                "comparison": ">=",
                "action": "stop",
            }
        ],
    )
    store.add_checkpoint(
        sha256="2" * 64,
        arm="A",
        status="failed",
        parent_sha256=installed,
        run_id=train_run,
        stage="anneal",
        gate_results=[
            {
                "gate": "tier1",
                "passed": False,
                "metric": "tier1_drop",
                "value": 0.0625,
                "threshold": 0.03,
                "comparison": "<=",
                "action": "stop",
            }
        ],
    )
    store.add_checkpoint(
        sha256="3" * 64, arm="A", status="exploratory", parent_sha256=base, run_id=train_run, stage="lr-probe"
    )
    dense = store.add_checkpoint(
        sha256="4" * 64,
        arm="B",
        status="promoted",
        parent_sha256=base,
        stage="sft",
        run_id=store.add_run(run_id="train-B", kind="train", protocol_sha256=sha, arm="B"),
    )
    eval_run = store.add_run(run_id="eval", kind="eval", protocol_sha256=sha)
    evidence = []
    for i, row in enumerate(manifest.rows):
        for loop in range(1, row.depth + 1):
            evidence.append(
                {
                    "run_id": eval_run,
                    "manifest_sha256": manifest.sha256,
                    "row_id": row.row_id,
                    "arm": "A",
                    "checkpoint_sha256": installed,
                    "loop": loop,
                    "prediction": row.answer,
                    "correct": not (loop == row.depth == 4 and i % 2 == 0),
                    "latency_ms": 10.0 * loop + i % 3 if loop == row.depth else None,
                }
            )
        evidence.append(
            {
                "run_id": eval_run,
                "manifest_sha256": manifest.sha256,
                "row_id": row.row_id,
                "arm": "B",
                "checkpoint_sha256": dense,
                "loop": 0,
                "prediction": row.answer,
                "correct": row.depth <= 2,
            }
        )
    store.add_evidence(evidence)
    out = report_for_protocol_name(store, "tiny-report", tmp / "out")
    yield store, protocol, out
    store.close()


def test_support_depths_come_from_the_training_stages(tiny):
    store, protocol, out = tiny
    assert support_depths_of(protocol.canonical()) == (1, 3)
    assert resolve_protocol(store, "tiny-report") == ((protocol.sha256,), (1, 3))
    accuracy = section(parse_html(out), "accuracy")
    assert "training support, depth 1-3" in accuracy.text()
    _, src = figure_with_img(accuracy, "per-depth accuracy on eval")
    assert_png(out.parent / src)
    # the train manifest holds no evidence and is a training manifest: never plotted
    assert {m.name for m in rule_chasing_manifests(store, (protocol.sha256,))} == {"eval"}
    with pytest.raises(LookupError):
        resolve_protocol(store, "no-such-protocol")


def test_latency_figure_and_arms_without_latency(tiny):
    _, _, out = tiny
    latency = section(parse_html(out), "latency")
    figure, src = figure_with_img(latency, "accuracy vs latency on eval")
    assert_png(out.parent / src)
    assert "A" in next(figure.iter("figcaption")).text()
    skipped = [p.text() for p in latency.iter("p") if p.has_class("latency-skipped")]
    assert skipped == ["No latency recorded (not plotted) for: B."]


def test_lineage_nests_children_under_parents_with_gates(tiny):
    _, _, out = tiny
    lineage = section(parse_html(out), "lineage")
    nodes = {li.attrs["data-sha"]: li for li in lineage.iter("li") if li.has_class("checkpoint")}
    assert set(nodes) == {"b" * 64, "1" * 64, "2" * 64, "3" * 64, "4" * 64}

    def parent_checkpoint(li):
        node = li.parent
        while node is not None and not (node.tag == "li" and node.has_class("checkpoint")):
            node = node.parent
        return node.attrs["data-sha"] if node is not None else None

    assert parent_checkpoint(nodes["b" * 64]) is None
    assert parent_checkpoint(nodes["1" * 64]) == "b" * 64
    assert parent_checkpoint(nodes["2" * 64]) == "1" * 64
    assert parent_checkpoint(nodes["3" * 64]) == "b" * 64
    assert {sha: li.attrs["data-status"] for sha, li in nodes.items()} == {
        "b" * 64: "promoted",
        "1" * 64: "promoted",
        "2" * 64: "failed",
        "3" * 64: "exploratory",
        "4" * 64: "promoted",
    }
    failed_gate = [li for li in nodes["2" * 64].iter("li") if li.has_class("gate")]
    assert len(failed_gate) == 1
    text = failed_gate[0].text()
    assert "tier1" in text and "0.0625" in text and "<= 0.03" in text and "FAILED" in text and "stop" in text
    passed_gate = [li for li in nodes["1" * 64].children if li.tag == "ul"][0]
    assert "0.95 >= 0.9" in passed_gate.text() and "passed" in passed_gate.text()


def test_unevaluated_claim_and_heatmap_of_a_hand_built_ledger(tiny):
    store, protocol, out = tiny
    root = parse_html(out)
    claims = section(root, "claims")
    rows = [tr for tr in claims.iter("tr") if "data-claim" in tr.attrs]
    assert [tr.attrs["data-claim"] for tr in rows] == ["tiny-report/A_accurate"]
    assert rows[0].attrs["data-outcome"] == "not evaluated" and "not evaluated" in rows[0].text()
    manifest = rule_chasing_manifests(store, (protocol.sha256,))[0].sha256
    grid = active_label_grid(store, (protocol.sha256,), manifest, "A")
    assert grid.values[3] == [1.0, 1.0, 1.0, 0.5]  # depth 4, loop 4: half the rows wrong
    assert grid.values[0] == [1.0, None, None, None]
    assert active_label_grid(store, (protocol.sha256,), manifest, "B") is None
    heatmaps = section(root, "heatmaps")
    _, src = figure_with_img(heatmaps, "arm A on eval")
    assert_png(out.parent / src)
    assert json.loads(json.dumps(grid.counts))[3] == [6, 6, 6, 6]


def test_header_lists_the_recorded_deviations_of_each_version(tmp_path):
    """A protocol registered, then changed through `deviate`: the report's header names, for the new version,
    the version it came from, when and why, and every deviated item."""
    from ledger.audit.preregistration import deviate

    smoke = (ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    old, new = tmp_path / "v1" / "smoke.yaml", tmp_path / "v2" / "smoke.yaml"
    changed = smoke.replace("seed: 11, split: test}", "seed: 12, split: test}", 1).replace(
        "version: 2", "version: 3", 1
    )
    for path, text in ((old, smoke), (new, changed)):
        path.parent.mkdir()
        path.write_text(text.replace("../claims/smoke.yaml", str(ROOT / "claims" / "smoke.yaml")), encoding="utf-8")
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        register(store, old)
        before, after, changes = deviate(store, new, reason="A fresh evaluation seed.", timing="before_data")
        html = write_report(store, (before, after), tmp_path / "report", title="t").read_text(encoding="utf-8")
    finally:
        store.close()
    header = html.split("</header>")[0]
    assert f"Recorded deviation from <code>{before[:12]}</code> (before_data): A fresh evaluation seed." in header
    assert all(item in header for item, _, _ in changes) and {"manifests.eval.seed", "version"} <= {
        c[0] for c in changes
    }
    assert header.count("Recorded deviation") == 1  # version 1 has none


def test_report_of_one_version_reads_its_runs_and_claims_and_an_unknown_version_is_one_line(tmp_path):
    """`ledger report NAME --version N`: the header names that version alone and the claims table holds the
    claims its registration preregistered (version 2's, here, were registered again unchanged by version 3)."""
    from ledger.audit.preregistration import deviate
    from ledger.report.html import report_for_protocol_name

    smoke = (ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    path = tmp_path / "smoke.yaml"
    path.write_text(smoke.replace("../claims/smoke.yaml", str(ROOT / "claims" / "smoke.yaml")), encoding="utf-8")
    db = tmp_path / "ledger.db"
    store = open_store(f"sqlite:///{db}")
    try:
        v1 = register(store, path).sha256
        path.write_text(path.read_text(encoding="utf-8").replace("version: 2", "version: 3", 1), encoding="utf-8")
        _, v2, _ = deviate(store, path, reason="a new version", timing="before_data")
        html = report_for_protocol_name(store, "smoke", tmp_path / "r2", version="3").read_text(encoding="utf-8")
    finally:
        store.close()
    header, claims = html.split("</header>")[0], html.split('id="claims"')[1].split("</section>")[0]
    assert v2 in header and v1 not in header.split("Recorded deviation")[0] and "smoke version 3" in header
    from ledger.protocol.claims import load_claims

    registered = [c.id for c in load_claims(ROOT / "claims" / "smoke.yaml").claims]
    assert all(claim_id in claims for claim_id in registered)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledger",
            "report",
            "smoke",
            "--version",
            "7",
            "--db",
            f"sqlite:///{db}",
            "--out",
            str(tmp_path / "r7"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "protocol 'smoke' has no registered version '7' (registered: 2, 3)"
    assert not (tmp_path / "r7").exists()


# ----------------------------------------------------------------------------- what the report leads with


def test_the_claims_come_first_then_evaluation_rows_then_every_arms_training_loss(tmp_path):
    """The report's sections in order (claims, accuracy, training loss, ...); the evaluation manifest's figure
    before a development manifest's, though the protocol lists the development one first; one loss figure per
    arm with its stages one after another, read from each checkpoint's recorded per-step losses."""
    text = PROTOCOL.replace(
        "  - {id: eval, role: eval,",
        "  - {id: dev, role: dev, generator: rule_chasing, alphabet: N16, depths: [1, 4], rows_per_depth: 6, seed: 11,"
        " split: dev}\n  - {id: eval, role: eval,",
    )
    (tmp_path / "protocol.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    store = open_store(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        register(store, tmp_path / "protocol.yaml")
        protocol = load_protocol(tmp_path / "protocol.yaml")
        manifests = build_manifests(protocol)
        run = store.add_run(run_id="train-A", kind="train", protocol_sha256=protocol.sha256, arm="A")
        spans = [("install@2", [3.0, 2.0]), ("install", [1.5]), ("anneal", [1.0, 0.9])]
        parent = None
        for i, (stage, losses) in enumerate(spans):
            parent = store.add_checkpoint(
                sha256=str(i + 1) * 64,
                arm="A",
                status="promoted",
                parent_sha256=parent,
                run_id=run,
                stage=stage,
                meta={"losses": losses, "steps": len(losses)},
            )
        eval_run = store.add_run(run_id="eval", kind="eval", protocol_sha256=protocol.sha256)
        store.add_evidence(
            [
                {
                    "run_id": eval_run,
                    "manifest_sha256": manifests[name].sha256,
                    "row_id": row.row_id,
                    "arm": "A",
                    "checkpoint_sha256": parent,
                    "loop": row.depth,
                    "prediction": row.answer,
                    "correct": True,
                }
                for name in ("dev", "eval")
                for row in manifests[name].rows
            ]
        )
        from ledger.report.data import training_losses

        assert [(s.stage, s.losses) for s in training_losses(store, (protocol.sha256,))["A"]] == [
            (stage, tuple(losses)) for stage, losses in spans
        ]
        out = report_for_protocol_name(store, "tiny-report", tmp_path / "out")
    finally:
        store.close()
    html = out.read_text(encoding="utf-8")
    order = [html.index(f'<section id="{name}">') for name in ("claims", "accuracy", "training", "heatmaps")]
    assert order == sorted(order) and html.index("<header>") < order[0]
    accuracy = section(parse_html(out), "accuracy")
    assert [h3.attrs["id"] for h3 in accuracy.iter("h3")] == ["accuracy-eval", "accuracy-dev"]
    figure, src = figure_with_img(section(parse_html(out), "training"), "training loss of arm A")
    assert_png(out.parent / src)
    assert "5 steps over stages install, anneal; last step 0.9" in next(figure.iter("figcaption")).text()


def test_the_report_leads_with_the_claims_as_a_picture(released):
    """Section 1 opens with the forest plot (every claim with an effect size) and the per-depth accuracy with the
    support shaded, both above the claims table."""
    _, _, html_path = released
    claims = section(parse_html(html_path), "claims")
    order = [node.tag for node in claims.iter() if node.tag in ("figure", "table")]
    assert order[:3] == ["figure", "figure", "table"], order
    _, forest = figure_with_img(claims, "effect and interval against the bar")
    _, accuracy = figure_with_img(claims, "leading per-depth accuracy")
    for source in (forest, accuracy):
        assert_png(html_path.parent / source)


def test_claim_effects_put_each_statistic_on_a_shared_form():
    from ledger.judge.noninferiority import tango_interval
    from ledger.report.claim_effects import claim_effect

    relay = claim_effect("relay", {"threshold": 0.8, "paper": {"figure": "relay 86.0%"}},
                         {"accuracy": 0.833, "wilson_low": 0.774, "wilson_high": 0.879}, "supported")  # fmt: skip
    assert relay is not None and (relay.value, relay.low, relay.bar, relay.paper) == (0.833, 0.774, 0.8, "relay 86.0%")
    paired = claim_effect("A_beats_B", {"direction": "greater"}, {"helped": 689, "hurt": 6, "n": 896}, "supported")
    expected = tango_interval(689, 6, 896, 0.95)
    assert paired is not None and paired.value == (689 - 6) / 896 and paired.bar == 0.0 and paired.holds_above
    assert (paired.low, paired.high) == (expected.lower, expected.upper) and paired.low < paired.value < paired.high
    below = claim_effect("C_beyond", {"direction": "at_most", "threshold": 0.1},
                         {"accuracy": 0.0, "wilson_low": 0.0, "wilson_high": 0.015}, "supported")  # fmt: skip
    assert below is not None and not below.holds_above
    kept = claim_effect("E_keeps", {}, {"difference": -0.04, "ci_low": -0.06, "ci_high": -0.01, "margin": 0.05}, None)
    assert kept is not None and kept.bar == -0.05 and kept.low == -0.06
    # the ratio against the claim's threshold, not the accuracy bar its frontier is read at
    ratio = claim_effect("ratio", {"bar": 0.71, "threshold": 1.3}, {"ratio": 1.415, "bar": 0.71}, "supported")
    assert ratio is not None and ratio.low is None and ratio.bar == 1.3  # one run: no interval to draw
    assert claim_effect("gate", {}, {"passed": True}, "supported") is None
    # a figure not measured (a dry run's frontier never reached, an empty row filter) is left out, not drawn
    assert claim_effect("unmeasured", {"threshold": 1.3}, {"ratio": None, "bar": 0.71}, "unverifiable") is None
    assert claim_effect("no rows", {}, {"accuracy": None, "wilson_low": None, "wilson_high": None}, None) is None


def test_the_first_screen_shows_the_claims(released):
    """The released paper's report opened in headless Chromium at 1400x1000: the claims section and the top of
    its picture (the forest plot) are above the fold; the statistic is said in words (its kind's summary)."""
    from test_serve import _chromium

    _, _, html_path = released
    probe = html_path.parent / "first-screen.html"
    script = (
        "<script>addEventListener('load', () => { const b = document.body;"
        " b.dataset.claimsTop = Math.round(document.getElementById('claims').getBoundingClientRect().top);"
        " b.dataset.rowBottom = Math.round(document.querySelector('#claims figure img').getBoundingClientRect().top);"
        " b.dataset.height = window.innerHeight; });</script>"
    )
    probe.write_text(html_path.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    done = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = dict(re.findall(r'data-(claims-top|row-bottom|height)="(\d+)"', done.stdout))
    assert set(found) == {"claims-top", "row-bottom", "height"}, done.stdout[:2000]
    assert int(found["height"]) >= 900 and int(found["row-bottom"]) < int(found["height"]), found
    claims = section(parse_html(html_path), "claims")
    assert "exact McNemar on the discordant pairs" in claims.text()
