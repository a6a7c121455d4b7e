"""SQL lives in ledger/store only: everything else reads through the store's typed read side.

The one exception is by design: ``ledger query`` hands the auditor's own SQL to
``Store.query`` (ledger/cli/ledger_commands.py, ``cmd_query``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "ledger" / "store"

# SQL statements as they would be written in a string literal (upper- or lower-case keywords).
SQL = re.compile(
    r"\bSELECT\b[^\n]*?\bFROM\b"
    r"|\bINSERT\s+INTO\b"
    r"|\bUPDATE\s+[\"\w.]+\s+SET\b"
    r"|\bDELETE\s+FROM\b"
    r"|\b(?:CREATE|DROP|ALTER)\s+(?:TEMP\s+|TEMPORARY\s+)?(?:TABLE|VIEW|INDEX|TRIGGER)\b",
    re.IGNORECASE,
)
# Calls that run SQL text; outside the store only `ledger query` may make one (Store.query).
SQL_METHODS = {"query", "query_df", "exec_driver_sql", "executescript"}
SQL_FUNCTIONS = {"text"}  # sqlalchemy.text(...) (a method of that name, e.g. matplotlib's, is no SQL)
ALLOWED_CALLS = {("ledger/cli/ledger_commands.py", "cmd_query", "query")}


def source_files() -> list[Path]:
    files = sorted((ROOT / "ledger").rglob("*.py")) + sorted((ROOT / "arms").rglob("*.py"))
    return [path for path in files if STORE not in path.parents]


def string_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal; an f-string's parts are joined around ``{}``."""
    found: list[tuple[int, str]] = []
    inside_fstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [value.value if isinstance(value, ast.Constant) else "{}" for value in node.values]
            found.append((node.lineno, "".join(str(part) for part in parts)))
            inside_fstrings.update(id(value) for value in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside_fstrings:
            found.append((node.lineno, node.value))
    return found


def sql_calls(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, enclosing function, called name) of every call that could run SQL text."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                func = child.func
                if isinstance(func, ast.Attribute) and func.attr in SQL_METHODS:
                    found.append((child.lineno, function, func.attr))
                elif isinstance(func, ast.Name) and func.id in SQL_FUNCTIONS:
                    found.append((child.lineno, function, func.id))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_the_scan_recognises_sql():
    for sql in (
        "SELECT row_id FROM evidence",
        "select 1 from rows where x = 1",
        "INSERT INTO runs (a) VALUES (1)",
        'UPDATE "rows" SET depth = 1',
        "DELETE FROM evidence",
        "CREATE VIEW v AS SELECT 1",
        "DROP TABLE rows",
    ):
        assert SQL.search(sql), sql
    for prose in (
        "The UPDATE AUDIT: did each group move?",
        "select the rows",
        "Run one read-only SQL statement (SELECT/WITH/EXPLAIN). Writes are refused (exit 3).",
        "delete the file from disk",
    ):
        assert not SQL.search(prose), prose
    tree = ast.parse('q = f"SELECT {column} FROM {table}"\nstore.query(q)\n')
    assert any(SQL.search(text) for _, text in string_literals(tree))
    assert sql_calls(tree) == [(2, "<module>", "query")]


def test_no_sql_strings_outside_the_store():
    offending = []
    for path in source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, text in string_literals(tree):
            match = SQL.search(text)
            if match:
                offending.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert not offending, "SQL outside ledger/store (add a typed read in ledger/store/lookups/):\n" + "\n".join(
        offending
    )


def test_no_sql_calls_outside_the_store_but_ledger_query():
    offending = []
    for path in source_files():
        relative = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, function, called in sql_calls(tree):
            if (relative, function, called) not in ALLOWED_CALLS:
                offending.append(f"{relative}:{line}: {called}() in {function}")
    assert not offending, "SQL calls outside ledger/store:\n" + "\n".join(offending)


def test_sqlalchemy_is_imported_by_the_store_only():
    offending = []
    for path in source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offending.extend(
                f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
                for name in names
                if name == "sqlalchemy" or name.startswith("sqlalchemy.") or name == "sqlite3"
            )
    assert not offending, "\n".join(offending)
