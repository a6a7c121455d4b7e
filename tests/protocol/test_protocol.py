"""Protocol schema and `ledger check`: strict, located, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ledger.cli.main import main
from ledger.protocol.loader import ProtocolError, load_protocol, parse_protocol
from ledger.protocol.protocol import protocol_json_schema

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ROOT / "protocols"
PHASE_A = PROTOCOLS / "phaseA.yaml"


def all_protocol_files() -> list[Path]:
    return sorted(path for path in PROTOCOLS.rglob("*") if path.suffix in {".yaml", ".yml"})


def test_there_are_protocols_to_validate():
    assert PHASE_A in all_protocol_files()


@pytest.mark.parametrize("path", all_protocol_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_protocol_under_protocols_validates(path):
    protocol = load_protocol(path)
    assert protocol.name and protocol.arms


def test_committed_schema_equals_generated():
    committed = json.loads((PROTOCOLS / "schema.json").read_text(encoding="utf-8"))
    assert committed == protocol_json_schema(), (
        "protocols/schema.json is stale: run `ledger schema --out protocols/schema.json`"
    )


def test_phase_a_protocol_validates_against_published_json_schema():
    import jsonschema

    data = yaml.safe_load(PHASE_A.read_text(encoding="utf-8"))
    jsonschema.validate(data, protocol_json_schema())


def test_phase_a_declares_the_papers_arms_and_manifest():
    """Version 4: the paper's arms and budgets as its release configures them (docs/phaseA-paper.md)."""
    protocol = load_protocol(PHASE_A)
    assert [arm.id for arm in protocol.arms] == ["A_install", "A", "A_anneal", "E", "E_anneal", "B", "C", "D"]
    evaluation = protocol.manifest("phaseA_eval")
    assert evaluation.size == 1792 and tuple(evaluation.depths) == (1, 14)
    assert protocol.arm("A").surgery.split == (6, 18)
    assert protocol.arm("E").budget.rank == 16
    assert {gate.kind for gate in protocol.gates} >= {"installation", "guardrail", "depth_gate", "within_rows"}

    def steps(arm_id: str) -> int:
        return sum(stage.steps for stage in protocol.arm(arm_id).stages)

    assert (steps("A_install"), steps("A"), steps("A_anneal"), steps("E"), steps("E_anneal")) == (
        6000,
        2000,
        2000,
        10000,
        1000,
    )
    assert protocol.arm("A").init_from == protocol.arm("A_anneal").init_from == "A_install"
    assert protocol.arm("E_anneal").init_from == "E"
    recurrent = [stage for arm in protocol.arms if arm.kind == "recurrent" for stage in arm.stages]
    assert {(s.batch_size, s.optimizer.lr, s.optimizer.grad_clip) for s in recurrent} == {(1, 1e-5, 0.5)}
    assert all(s.optimizer.group_lrs == {"bridge_p": 10} for s in recurrent)
    dense = [stage for arm in protocol.arms if arm.kind == "dense" for stage in arm.stages]
    assert {(s.steps, s.batch_size, s.optimizer.lr, s.optimizer.grad_clip) for s in dense} == {(4000, 8, 2e-6, 1.0)}
    assert {arm.id: arm.evaluation.max_new_tokens for arm in protocol.arms if arm.kind == "dense"} == {
        "B": 32,
        "C": 96,
        "D": 32,
    }
    installation = next(gate for gate in protocol.gates if gate.kind == "installation")
    assert installation.per_depth_threshold == 0.9 and installation.action == "stop"
    within = next(gate for gate in protocol.gates if gate.kind == "within_rows")
    assert (within.arm, within.versus, within.rows) == ("E", "A", 8)
    arc = {name: protocol.manifest(name) for name in ("arc_easy", "arc_challenge")}
    assert {(m.ids, m.permutations, tuple(m.loops), m.sha256) for m in arc.values()} == {
        ("arc_easy", 4, (1,), None),
        ("arc_challenge", 4, (1,), None),
    }


def test_protocol_hash_ignores_formatting_but_not_content():
    text = PHASE_A.read_text(encoding="utf-8")
    reformatted = yaml.safe_dump(yaml.safe_load(text), sort_keys=True, default_flow_style=True)
    assert parse_protocol(reformatted).sha256 == parse_protocol(text).sha256
    assert (
        parse_protocol(text.replace("seed: 20260707\n\nbases", "seed: 20260708\n\nbases")).sha256
        != parse_protocol(text).sha256
    )


# ----------------------------------------------------------------------------- bad protocols

# mutations of phaseA.yaml's version 3 (kept beside the pins), whose layout each one names
SOURCE = (ROOT / "tests" / "pins" / "versions" / "phaseA.v3.yaml").read_text(encoding="utf-8")


def _replace_once(old: str, new: str) -> str:
    assert old in SOURCE, old
    return SOURCE.replace(old, new, 1)


BAD_PROTOCOLS = {
    # name: (text, expected field path fragment, expected reason fragment)
    "missing field": (_replace_once("name: phaseA\n", ""), "name", "required field is missing"),
    "wrong type": (_replace_once("steps: 2000", "steps: many"), "arms.0.stages.0.steps", "valid integer"),
    "typo'd key": (
        _replace_once("rows_per_depth: 128", "rows_per_dept: 128"),
        "manifests.2.rows_per_dept",
        "did you mean 'rows_per_depth'",
    ),
    "unknown arm reference": (
        _replace_once("    arm: A\n    versus: B", "    arm: Z\n    versus: B"),
        "gates.2.arm",
        "unknown arm 'Z'",
    ),
    "unknown manifest reference": (
        _replace_once("manifests: [phaseA_eval, persistence]", "manifests: [phaseA_evl, persistence]"),
        "arms.0.evaluation.manifests.0",
        "did you mean 'phaseA_eval'",
    ),
    "unknown gate reference": (
        _replace_once("gates: [installation, tier1]", "gates: [install, tier1]"),
        "arms.0.stages.0.gates.0",
        "unknown gate 'install'",
    ),
    "unknown base reference": (_replace_once("base: qwen15", "base: qwen3"), "arms.4.base", "unknown base"),
    "duplicate arm id": (_replace_once("  - id: E\n", "  - id: A\n"), "arms.1.id", "duplicate id 'A'"),
    "inverted depth range": (_replace_once("depths: [1, 14]", "depths: [14, 1]"), "manifests.2.depths", "inverted"),
    "alphabet too small": (
        _replace_once("depths: [1, 14]", "depths: [1, 16]"),
        "manifests.2.alphabet",
        "needs 17 distinct symbols",
    ),
    "rows_per_depth zero": (
        _replace_once("rows_per_depth: 128", "rows_per_depth: 0"),
        "manifests.2.rows_per_depth",
        "greater than or equal to 1",
    ),
    "unknown kind": (_replace_once("kind: recurrent", "kind: recurent"), "arms.0.kind", "did you mean 'recurrent'"),
    "surgery both forms": (
        _replace_once("{split: [6, 18]}", "{split: [6, 18], tuple: [4, 8, 4]}"),
        "arms.0.surgery",
        "exactly one",
    ),
    "surgery past the base": (
        _replace_once("num_layers: 24", "num_layers: 12"),
        "arms.0.surgery",
        "needs at least 19 layers",
    ),
    "dense objective on recurrent arm": (
        _replace_once("objective: intermediate", "objective: sft_direct"),
        "arms.0.stages.0.objective",
        "not for recurrent arms",
    ),
    "training on an eval manifest": (
        _replace_once("manifest: train\n        steps: 2000", "manifest: dev\n        steps: 2000"),
        "arms.0.stages.0.manifest",
        "role 'train'",
    ),
    "until a gate the stage does not read": (
        _replace_once(
            "        gates: [installation, tier1]\n",
            "        gates: [tier1]\n        until: {gate: installation, every: 100}\n",
        ),
        "arms.0.stages.0.until.gate",
        "not one of this stage's gates",
    ),
    "until read no sooner than the cap": (
        _replace_once(
            "        gates: [installation, tier1]\n",
            "        gates: [installation, tier1]\n        until: {gate: installation, every: 2000}\n",
        ),
        "arms.0.stages.0.until.every",
        "not before the stage's cap of 2000",
    ),
    "until on evaluation rows": (
        _replace_once(
            "        gates: [installation, tier1]\n",
            "        gates: [installation, tier1]\n        until: {gate: installation, every: 100}\n",
        ).replace("    manifest: dev\n    depths: [1, 4]", "    manifest: phaseA_eval\n    depths: [1, 4]", 1),
        "arms.0.stages.0.until.gate",
        "a stopping rule reads development rows",
    ),
    "duplicate YAML key": (
        _replace_once("seed: 20260707\n\nbases", "seed: 1\nseed: 2\n\nbases"),
        "seed",
        "duplicate key",
    ),
    "unreadable YAML": (_replace_once("name: phaseA", "name: [phaseA"), "", "unreadable YAML"),
    "top level not a mapping": ("- just\n- a list\n", "", "expected a mapping"),
    "empty file": ("", "", "empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROTOCOLS))
def test_bad_protocol_gives_located_error_and_exit_2(case, tmp_path, capsys):
    text, field, reason = BAD_PROTOCOLS[case]
    (tmp_path / "claims").mkdir()  # the protocol names ../claims/phaseA.yaml: version 3's
    shutil.copy(ROOT / "tests" / "pins" / "versions" / "phaseA.claims.v3.yaml", tmp_path / "claims" / "phaseA.yaml")
    (tmp_path / "protocols").mkdir()
    path = tmp_path / "protocols" / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["check", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err
    first = captured.err.strip().splitlines()[0]
    assert first.startswith(str(path)), first
    assert reason in captured.err, captured.err
    if field:
        assert f" {field}:" in captured.err, captured.err
    if text.strip() and case != "top level not a mapping":
        # A located message names the line: file:LINE:
        assert first.split(":")[1].isdigit(), first


def test_user_text_is_printed_as_written(tmp_path, capsys):
    """A description with brackets and a file line past 99 reach the terminal as written: neither is read as rich
    markup ("E[r] = k" lost its "[r]") nor as an emoji code (":100:" became a symbol)."""
    text = (ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8")
    text = text.replace("description: >-\n", "description: >-\n  The sampler's E[r] = k, [bold]as written[/bold].\n", 1)
    text += "\n" * (100 - text.count("\n")) + "stray_key: 1\n"  # an error located on line 101 or later
    (tmp_path / "protocols").mkdir()
    shutil.copytree(ROOT / "claims", tmp_path / "claims")
    path = tmp_path / "protocols" / "smoke.yaml"
    path.write_text(text.replace("stray_key: 1\n", ""), encoding="utf-8")
    assert main(["check", str(path)]) == 0
    assert "E[r] = k, [bold]as written[/bold]." in capsys.readouterr().out
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 2
    first = capsys.readouterr().err.strip().splitlines()[0]
    assert first.startswith(f"{path}:1") and first.split(":")[1].isdigit() and int(first.split(":")[1]) > 100, first


def test_error_line_points_at_the_offending_key(tmp_path):
    text, _, _ = BAD_PROTOCOLS["typo'd key"]
    with pytest.raises(ProtocolError) as info:
        parse_protocol(text, "p.yaml")
    (issue,) = info.value.issues
    assert text.splitlines()[issue.line - 1].strip().startswith("rows_per_dept:")


def test_missing_file_is_exit_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_cli_entry_point_exits_2_without_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_PROTOCOLS["typo'd key"][0], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "ledger", "check", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "rows_per_dept" in result.stderr


# ----------------------------------------------------------------------------- property: no traceback escapes

BASE_DATA = yaml.safe_load(SOURCE)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 40),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.lists(st.integers(-2, 30), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


ALL_PATHS = [path for path in _paths(BASE_DATA) if path]


def _mutate(data, path, operation, value):
    import copy

    data = copy.deepcopy(data)
    parent = data
    for element in path[:-1]:
        parent = parent[element]
    last = path[-1]
    if operation == "delete":
        del parent[last]
    elif operation == "replace":
        parent[last] = value
    elif operation == "add_key" and isinstance(parent, dict):
        parent[str(value)[:8] or "x"] = value
    elif operation == "duplicate" and isinstance(parent, list):
        parent.append(parent[last])
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(
        st.tuples(st.sampled_from(ALL_PATHS), st.sampled_from(["delete", "replace", "add_key", "duplicate"]), SCALARS),
        min_size=1,
        max_size=3,
    )
)
# found by this test: a gate with depths whose manifest was deleted raised AttributeError
@example(mutations=[(("manifests", 0), "delete", None), (("manifests", 0), "delete", None)])
def test_mutated_protocols_never_raise_anything_but_protocol_error(mutations):
    data = BASE_DATA
    for path, operation, value in mutations:
        try:
            data = _mutate(data, path, operation, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed the path
    text = yaml.safe_dump(data, allow_unicode=True)
    try:
        parse_protocol(text, "mutated.yaml")
    except ProtocolError as exc:
        assert exc.issues
        for issue in exc.issues:
            assert issue.message and "\n" not in issue.message


@settings(max_examples=150, deadline=None)
@given(cut=st.integers(0, len(SOURCE)), junk=st.text(max_size=5))
def test_textually_damaged_protocols_never_raise_anything_but_protocol_error(cut, junk):
    text = SOURCE[:cut] + junk + SOURCE[cut + len(junk) :]
    try:
        parse_protocol(text, "damaged.yaml")
    except ProtocolError as exc:
        assert exc.issues


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    """A 4 KB 'billion laughs' file (10^9 values through nested aliases) is a located bad-input message."""
    from ledger.protocol.loader import ProtocolError, load_protocol

    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for previous, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert bomb.stat().st_size < 4096
    with pytest.raises(ProtocolError, match="alias bomb"):
        load_protocol(bomb)


def test_aliases_repeating_one_long_string_are_refused_by_their_expanded_characters(tmp_path):
    """Within the node budget (a few hundred values) and the one-string budget, a claim file whose aliases repeat
    a 12,000-character statement expands to megabytes: refused by characters, not registered."""
    from ledger.protocol.claims import load_claims
    from ledger.protocol.loader import MAX_EXPANDED_CHARS, MAX_EXPANDED_NODES, ProtocolError

    statement = "s" * 12_000
    repeats = MAX_EXPANDED_CHARS // len(statement) + 1
    assert repeats * 3 < MAX_EXPANDED_NODES  # the node budget alone would let it through
    text = f"protocol: smoke\nnote: &long {statement}\nclaims: [{', '.join(['*long'] * repeats)}]\n"
    planted = tmp_path / "claims.yaml"
    planted.write_text(text, encoding="utf-8")
    assert planted.stat().st_size < 20_000
    with pytest.raises(ProtocolError, match=f"more than {MAX_EXPANDED_CHARS:,} characters"):
        load_claims(planted)
