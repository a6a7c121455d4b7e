"""`pylock.toml` at the root (PEP 751) pins exactly what `requirements/cpu.lock` pins: every distribution at
the same version, each file it names among that pin's hashes (it keeps only Linux x86_64's wheels and the
sdist), and no path of the machine that compiled it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_root_lock_pins_what_the_cpu_lock_pins():
    text = (ROOT / "requirements" / "cpu.lock").read_text(encoding="utf-8")
    pinned: dict[str, tuple[str, set[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", block)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            pinned[name] = (match.group(2), set(re.findall(r"--hash=sha256:([0-9a-f]{64})", block)))
    lock = tomllib.loads((ROOT / "pylock.toml").read_text(encoding="utf-8"))
    assert lock["lock-version"] == "1.0"
    locked = {}
    for package in lock["packages"]:
        files = list(package.get("wheels", [])) + ([package["sdist"]] if "sdist" in package else [])
        locked[package["name"]] = (package["version"], {f["hashes"]["sha256"] for f in files})
        assert all(f["url"].startswith("https://") for f in files), package["name"]
    assert {name: version for name, (version, _) in locked.items()} == {n: v for n, (v, _) in pinned.items()}
    for name, (_, hashes) in locked.items():
        assert hashes and hashes <= pinned[name][1], name
