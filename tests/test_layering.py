"""The house reads top to bottom along the data flow.

Every module belongs to a stage; a module may import only from its own stage or an
earlier one (no upward imports, anywhere in a function body either), and no modules import
each other in a circle (within a stage, the only place one could form), counting imports in
function bodies and under `TYPE_CHECKING` too. `ledger/` never imports torch, transformers,
peft or arms at module top, and only the orchestration stages (`ledger.run`, `ledger.cli`)
reach arms at all.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The flow: protocol -> rows -> reader -> (arms) -> store -> judge -> audit -> report -> run -> cli.
STAGES: tuple[tuple[str, int], ...] = (
    ("ledger.canonical", 0),
    ("ledger.registry", 0),
    ("ledger.environment", 0),
    ("ledger.inputs", 0),
    ("ledger.model_files", 0),  # read before any library parses a model file: init, check, arms' loader
    ("ledger.checked_file", 0),  # the bytes a recorded hash vouches for: the run, export, arms' loader
    ("ledger.variables", 0),
    ("ledger.protocol", 10),
    ("ledger.rows", 20),
    ("ledger.reader", 30),
    ("arms.bases", 31),
    # the files an export ships (the model, the loop's pieces, the bridges): torch and transformers only
    ("arms.hf.modeling_ledger_recurrent", 31),
    ("arms.hf.ledger_loop", 31),
    ("arms.hf.bridge_split", 31),
    ("arms.hf.bridge_concat", 31),
    ("arms.hf.ledger_bridge", 31),  # written into each export beside the model file, naming its bridge
    ("arms.model", 32),
    ("arms.train", 33),
    ("arms.dense", 33),
    ("arms", 34),  # arms' own top: runtime, params
    ("ledger.store", 40),
    ("ledger.judge", 50),
    ("ledger.audit", 60),
    ("ledger.report", 70),
    ("ledger.run", 80),
    ("ledger.cli", 90),
    ("ledger.__main__", 90),
    ("ledger", 0),  # the package's own __init__
)
HEAVY = ("torch", "transformers", "peft", "safetensors", "accelerate", "arms")
MAY_REACH_ARMS = ("ledger.run", "ledger.cli", "ledger.__main__")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def stage_of(module: str) -> int:
    for prefix, rank in STAGES:
        if _within(module, prefix):
            return rank
    raise AssertionError(f"module {module} belongs to no stage: add it to STAGES")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    files = sorted((ROOT / "ledger").rglob("*.py")) + sorted((ROOT / "arms").rglob("*.py"))
    return [path for path in files if "migrations" not in path.parts]


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module top) for every import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.append((base, child.lineno, top))
                if base in ("ledger", "arms"):  # `from ledger import stats` names a submodule
                    found.extend((f"{base}.{alias.name}", child.lineno, top) for alias in child.names)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                visit(ast.Module(body=child.orelse, type_ignores=[]), top)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            else:
                visit(child, top)

    visit(tree, True)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def ours(module: str) -> bool:
    return _within(module, "ledger") or _within(module, "arms")


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_upward_import(path: Path) -> None:
    me = module_name(path)
    rank = stage_of(me)
    upward = [
        f"{path.relative_to(ROOT)}:{line}: {me} (stage {rank}) imports {name} (stage {stage_of(name)})"
        for name, line, _ in imports_of(path)
        if ours(name) and stage_of(name) > rank
    ]
    assert not upward, "\n".join(upward)


@pytest.mark.parametrize(
    "path", [p for p in source_files() if p.is_relative_to(ROOT / "ledger")], ids=lambda p: str(p.relative_to(ROOT))
)
def test_ledger_keeps_models_out(path: Path) -> None:
    me = module_name(path)
    problems = []
    for name, line, top in imports_of(path):
        heavy = any(_within(name, h) for h in HEAVY)
        if heavy and top:
            problems.append(f"{path.relative_to(ROOT)}:{line}: {name} imported at module top")
        if _within(name, "arms") and not any(_within(me, m) for m in MAY_REACH_ARMS):
            problems.append(f"{path.relative_to(ROOT)}:{line}: only ledger.run and ledger.cli may reach arms")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_an_upward_and_a_heavy_import(tmp_path: Path) -> None:
    """The checker itself: a planted upward import and a top-level torch import are found."""
    planted = ROOT / "ledger" / "protocol" / "_planted_for_test.py"
    planted.write_text("import torch\n\ndef f():\n    from ledger.judge import stats\n")
    try:
        found = imports_of(planted)
        assert ("torch", 1, True) in found and ("ledger.judge", 4, False) in found
        with pytest.raises(AssertionError, match=r"imports ledger\.judge"):
            test_no_upward_import(planted)
        with pytest.raises(AssertionError, match="torch imported at module top"):
            test_ledger_keeps_models_out(planted)
    finally:
        planted.unlink()


def import_edges(path: Path) -> list[tuple[str, int, str]]:
    """(our module imported, line, where: top, function or TYPE_CHECKING) for every import of ours in the file,
    ``from package import name`` resolved to the submodule where ``name`` is one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: list[tuple[str, int, str]] = []

    def is_module(name: str) -> bool:
        relative = Path(*name.split("."))
        return (ROOT / relative.with_suffix(".py")).is_file() or (ROOT / relative / "__init__.py").is_file()

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, where) for alias in child.names if ours(alias.name))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                if not ours(base):
                    continue
                for alias in child.names:
                    name = f"{base}.{alias.name}"
                    found.append((name if is_module(name) else base, child.lineno, where))
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                visit(ast.Module(body=child.body, type_ignores=[]), "TYPE_CHECKING")
                visit(ast.Module(body=child.orelse, type_ignores=[]), where)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function" if where == "top" else where)
            else:
                visit(child, where)

    visit(tree, "top")
    return found


def import_circle(files: list[Path]) -> list[str] | None:
    """A circle of imports among ``files`` (each edge as file:line, what, where), or None where there is none."""
    graph: dict[str, set[str]] = {}
    edges: dict[tuple[str, str], str] = {}
    names = {module_name(path): path for path in files}
    for me, path in names.items():
        graph.setdefault(me, set())
        for name, line, where in import_edges(path):
            if name in names and name != me:
                graph[me].add(name)
                edges.setdefault((me, name), f"{path.relative_to(ROOT)}:{line} imports {name} ({where})")
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as found:
        circle = found.args[1]  # [a, b, ..., a]: each imported by the one after it
        return [edges[(later, earlier)] for earlier, later in zip(circle, circle[1:])]
    return None


def test_no_import_circle() -> None:
    """A circle says its modules are one concept, or share one that belongs below them: a leaf module holds what
    both need (``arms.runtime_common``, ``ledger.run.run_context``), and neither imports the other back."""
    circle = import_circle(source_files())
    assert circle is None, "modules import each other in a circle:\n" + "\n".join(circle or [])


def test_the_checker_sees_a_circle_through_a_function_and_type_checking() -> None:
    folder = ROOT / "ledger" / "protocol"
    a, b = folder / "_planted_circle_a.py", folder / "_planted_circle_b.py"
    a.write_text("def f():\n    from ledger.protocol import _planted_circle_b\n")
    b.write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from ledger.protocol._planted_circle_a import f\n"
    )
    try:
        circle = import_circle([a, b])
        assert circle is not None and len(circle) == 2, circle
        assert any("(function)" in edge for edge in circle) and any("(TYPE_CHECKING)" in edge for edge in circle)
        assert import_circle([a]) is None
    finally:
        a.unlink()
        b.unlink()


CHECK = """
import importlib, pkgutil, sys
import ledger
names = [m.name for m in pkgutil.walk_packages(ledger.__path__, "ledger.")
         if "migrations" not in m.name and m.name != "ledger.__main__"]
for name in names:
    importlib.import_module(name)
heavy = sorted(m for m in ("torch", "transformers", "peft") if m in sys.modules)
print(len(names), ",".join(heavy) or "none")
"""


def test_every_ledger_module_imports_without_torch() -> None:
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    count, heavy = result.stdout.split()
    assert int(count) >= 20 and heavy == "none", result.stdout
