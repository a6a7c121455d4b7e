"""Environment records read and compared: which lock an installation matches, and how two records differ.

A run's environment record (``ledger/run/environment.py`` takes it) says what the run ran on:
every installed distribution, the lock those match, Python and the platform, torch's build (its CPU
capability, BLAS), the threads and the determinism settings. Two records are compared here, without
torch, so that ``ledger verify``, ``ledger run --resume``, ``ledger compare`` and the report say the
same thing in the same words: one line per difference, never a silent pass.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# A pin of a hashed requirements lock (pip-tools / `uv pip compile` format): `name==version \`.
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")

# What differs between two records that matters to the arithmetic, in the order it is reported.
# The device of one arm (device, device_name, dtype) is compared where both records have it.
COMPARED = (
    "python",
    "implementation",
    "platform",
    "machine",
    "cpu",
    "torch",
    "torch_build",
    "threads",
    "interop_threads",
    "thread_env",
    "determinism",
    "cuda",
    "cudnn",
    "gpus",
    "device",
    "device_name",
    "dtype",
    "lock",
    "git",
)


def normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares it (``Typing_Extensions`` is ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(path: Path) -> dict[str, str]:
    """``{name: version}`` of every pin in a hashed requirements lock."""
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        found = _PIN.match(line.strip())
        if found:
            pins[normalise(found.group(1))] = found.group(2)
    return pins


def lock_record(folder: Path | None, installed: Mapping[str, str]) -> dict[str, Any] | None:
    """The lock in ``folder`` (``*.lock``) that the installed distributions match.

    The lock with the most pins installed at their versions (of two as close, the one with fewer unmet
    pins), its unmet pins listed: a CPU install matches ``cpu.lock`` whole, a test install ``dev.lock``,
    and a test install with one package moved ``dev.lock`` but one. None where there is no lock (an
    installation from a wheel).
    """
    if folder is None or not folder.is_dir():
        return None
    candidates: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.lock")):
        pins = lock_pins(path)
        if not pins:
            continue
        unmet = sorted(
            f"{name}=={version} ({'installed ' + installed[name] if name in installed else 'not installed'})"
            for name, version in pins.items()
            if installed.get(name) != version
        )
        candidates.append(
            {
                "file": f"{folder.name}/{path.name}",
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "pins": len(pins),
                "unmet": unmet,
            }
        )
    if not candidates:
        return None
    return min(candidates, key=lambda lock: (len(lock["unmet"]) - lock["pins"], len(lock["unmet"]), lock["file"]))


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(_shown(item) for item in value) or "none"
    return str(value)


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key in sorted(value):
            flat.update(_flat(value[key], f"{prefix}.{key}"))
        return flat
    return {prefix: value}


def _lock_view(lock: Any) -> Any:
    """A lock as compared: which file, its hash and whether every pin is met (the unmet pins themselves
    show as distribution differences)."""
    if not isinstance(lock, Mapping):
        return lock
    unmet = len(lock.get("unmet") or [])
    met = "every pin met" if not unmet else f"{unmet} pin{'' if unmet == 1 else 's'} unmet"
    return f"{lock.get('file')} sha256 {str(lock.get('sha256'))[:12]} ({met})"


def _git_view(git: Any) -> Any:
    if not isinstance(git, Mapping):
        return git
    return f"{str(git.get('commit'))[:12]}{' (dirty)' if git.get('dirty') else ''}"


def distribution_differences(
    recorded: Mapping[str, str], current: Mapping[str, str], labels: tuple[str, str] = ("recorded", "here")
) -> list[str]:
    """One line per distribution installed at another version; one line each for those installed on
    one side only (a test install beside a run's: many names, one fact)."""
    lines = [
        f"{name}: {recorded[name]} {labels[0]}, {current[name]} {labels[1]}"
        for name in sorted(set(recorded) & set(current))
        if recorded[name] != current[name]
    ]
    for side, names in ((labels[0], set(recorded) - set(current)), (labels[1], set(current) - set(recorded))):
        if names:
            shown = ", ".join(f"{name} {(recorded if side == labels[0] else current)[name]}" for name in sorted(names))
            lines.append(f"distributions only {side} ({len(names)}): {shown}")
    return lines


def environment_differences(
    recorded: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    labels: tuple[str, str] = ("recorded", "here"),
    ignore: tuple[str, ...] = (),
) -> list[str]:
    """One line per difference between an environment ``recorded`` by a run and ``current`` (another
    record, or this process's), in the words ``labels`` gives each side.

    A key ``recorded`` lacks (a record made before it was kept) is named once, not guessed at. Keys
    of one arm's device are compared only where both sides have them; keys in ``ignore`` not at all.
    """
    before_label, now_label = labels
    lines: list[str] = []
    missing = []
    for key in COMPARED:
        if key not in current or key in ignore:
            continue
        if key not in recorded:
            if key not in ("device", "device_name", "dtype"):
                missing.append(key)
            continue
        before, now = recorded[key], current[key]
        if key == "lock":
            before, now = _lock_view(before), _lock_view(now)
        if key == "git":
            before, now = _git_view(before), _git_view(now)
        flat_before, flat_now = _flat(before, key), _flat(now, key)
        for path in sorted(set(flat_before) | set(flat_now)):
            a, b = flat_before.get(path), flat_now.get(path)
            if a != b:
                lines.append(f"{path}: {_shown(a)} {before_label}, {_shown(b)} {now_label}")
    recorded_dists = recorded.get("distributions")
    current_dists = current.get("distributions")
    if isinstance(current_dists, Mapping):
        if isinstance(recorded_dists, Mapping):
            lines += distribution_differences(recorded_dists, current_dists, labels)
        else:
            missing.append("distributions")
            packages = recorded.get("packages")
            if isinstance(packages, Mapping):  # the few a record kept before every distribution was
                known = {normalise(name): version for name, version in packages.items() if version}
                kept = {name: current_dists[name] for name in known if name in current_dists}
                lines += distribution_differences(known, kept, labels)
    if missing:
        lines.append(f"not {before_label}, so not compared: {', '.join(missing)}")
    return lines


def recorded_environments(runs: Iterable[Mapping[str, Any]]) -> list[tuple[list[str], dict[str, Any]]]:
    """``(run ids, environment)`` per distinct environment the ``runs`` rows recorded, in first-seen order
    (an unreadable record reads as an empty one): what the report, the fingerprint and verify compare."""
    grouped: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for run in runs:
        try:
            environment = json.loads(run.get("environment_json") or "{}")
        except ValueError:
            environment = {}
        key = json.dumps(environment, sort_keys=True)
        grouped.setdefault(key, ([], environment))[0].append(run["run_id"])
    return list(grouped.values())
