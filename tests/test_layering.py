"""The framework imports without torch: only arms/ (reached lazily by the runner) touches models."""

from __future__ import annotations

import subprocess
import sys

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


def test_every_ledger_module_imports_without_torch():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    count, heavy = result.stdout.split()
    assert int(count) >= 20 and heavy == "none", result.stdout
