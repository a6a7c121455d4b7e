"""An arm kind is an interface: outside the kinds' own files, nothing in the product asks an arm what it is.

A probe is any of: ``getattr``/``hasattr`` on an arm; comparing an arm's ``kind`` with a kind's name;
``isinstance`` against an arm kind's class; reading the kind's name out of a literal ("dense",
"recurrent"). Registry look-ups by ``arm.kind`` (``ARM_KINDS[arm.kind]``) and printing it are not probes:
they ask the kind, not the arm."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The kinds' own files: the interface, one spec per built-in kind, and the recurrent kind's reading.
KIND_FILES = {
    "ledger/protocol/arms.py",
    "ledger/protocol/recurrent_arm.py",
    "ledger/protocol/dense_arm.py",
    "arms/recurrent_reading.py",
}
ARM_NAMES = {"arm", "arm_spec", "source", "other", "continued"}
# A runtime's model asked for a part that only one kind has (asking a transformers model for its own API is not
# a probe of the arm's kind).
PARTS = {"surgery", "bridge", "halting_head", "block", "adapter", "block_norms"}
KIND_NAMES = {"dense", "recurrent"}
KIND_CLASSES = {"RecurrentArm", "DenseArm", "ArmSpec"}


def _named_arm(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in ARM_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in ARM_NAMES
    )


def _asks_for_a_part(args: list[ast.expr]) -> bool:
    name = args[1]
    return isinstance(name, ast.Constant) and name.value in PARTS


def _kind_of_arm(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "kind" and _named_arm(node.value)


def probes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "hasattr") and node.args and _named_arm(node.args[0]):
                found.append(f"{where}: {node.func.id} on an arm")
            elif node.func.id in ("getattr", "hasattr") and len(node.args) > 1 and _asks_for_a_part(node.args):
                found.append(f"{where}: {node.func.id} for a kind's part")
            if node.func.id == "isinstance" and len(node.args) == 2:
                classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                if any(isinstance(c, ast.Name) and c.id in KIND_CLASSES for c in classes):
                    found.append(f"{where}: isinstance against an arm kind")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            literals = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
            if any(_kind_of_arm(s) for s in sides) and (literals & KIND_NAMES or len(sides) > 1):
                if not all(isinstance(s, ast.Attribute) for s in sides):  # arm.kind == source.kind: the kind's own
                    found.append(f"{where}: an arm's kind compared")
            if literals & KIND_NAMES and any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides):
                found.append(f"{where}: a kind's name compared")
    return found


def test_no_probe_of_an_arm_outside_the_kinds_own_files():
    files = sorted((ROOT / "ledger").rglob("*.py")) + sorted((ROOT / "arms").rglob("*.py"))
    files = [f for f in files if str(f.relative_to(ROOT)) not in KIND_FILES and "migrations" not in f.parts]
    found = [probe for path in files for probe in probes(path)]
    assert not found, "\n".join(found)


def test_the_check_finds_a_probe_where_there_is_one(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        'def f(arm):\n    if arm.kind == "dense":\n        return getattr(arm, "bridge", None)\n', encoding="utf-8"
    )
    found = probes(planted)
    assert len(found) == 3, found  # the comparison (twice: an arm's kind, a kind's name) and the getattr


# A bridge is an interface too (``arms.hf.ledger_loop.Bridge``): in ``arms/`` nothing asks a bridge module which
# class it is or compares a bridge kind's name; it asks the bridge (``enter``, ``leave``, ``export_options``...).
BRIDGE_FILES = {"arms/hf/bridge_split.py", "arms/hf/bridge_concat.py"}


def bridge_probes(path: Path) -> list[str]:
    from ledger.protocol.arms import BRIDGES

    names = set(BRIDGES.names())
    classes = {kind.implementation.rpartition(":")[2] for kind in BRIDGES}
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            if len(node.args) == 2:
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                if any(
                    isinstance(c, (ast.Name, ast.Attribute)) and ast.unparse(c).split(".")[-1] in classes for c in kinds
                ):
                    found.append(f"{where}: isinstance against a bridge's class")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for side in sides:  # a tuple of names compared by ``in`` counts as each name
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    found.append(f"{where}: a bridge kind's name compared")
                    break
    return found


def test_no_probe_of_a_bridge_in_arms():
    files = [f for f in sorted((ROOT / "arms").rglob("*.py")) if str(f.relative_to(ROOT)) not in BRIDGE_FILES]
    found = [probe for path in files for probe in bridge_probes(path)]
    assert not found, "\n".join(found)


def test_the_check_finds_a_bridge_probe_where_there_is_one(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def f(model, bridge):\n"
        "    if isinstance(model.bridge, SplitBridge):\n"
        "        return 1\n"
        '    return {"state_norm": True} if bridge == "split" else {}\n',
        encoding="utf-8",
    )
    assert len(bridge_probes(planted)) == 2, bridge_probes(planted)
