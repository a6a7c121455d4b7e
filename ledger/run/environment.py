"""What a run records of the machine and code it ran on (the ``runs.environment`` of each run).

* the project's git commit and whether its tree was dirty (the repository holding the
  protocol file; the ledger's own source too when that is another repository);
* the versions of ledger, torch, transformers, peft, safetensors, CUDA and cuDNN;
* the device the arms ran on, its name and the protocol's dtype, and every visible GPU;
* python, platform and torch's thread count.

Nothing here fails a run: a value that cannot be read (no git, no CUDA) is recorded as
``None``, which says exactly that.
"""

from __future__ import annotations

import copy
import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("ledger", "torch", "transformers", "peft", "safetensors", "accelerate")


def git_state(folder: Path) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git repository holding ``folder`` (None outside one)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status), "root": git("rev-parse", "--show-toplevel")}


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def environment_record(project_folder: Path, device: dict[str, Any]) -> dict[str, Any]:
    """The environment of a run whose protocol lives in ``project_folder``, on ``device``
    (``arms.device.describe``: device, device_name, dtype)."""
    return {**copy.deepcopy(_machine_and_code(project_folder)), **device}


@functools.cache  # git and the package metadata are read once per process, not once per arm
def _machine_and_code(project_folder: Path) -> dict[str, Any]:
    import torch

    project = git_state(project_folder)
    source = git_state(Path(__file__).resolve().parent)
    cuda = torch.cuda.is_available()
    record: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "packages": package_versions(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "git": project,
    }
    if source is not None and (project is None or source["root"] != project["root"]):
        record["ledger_git"] = source
    for state in (record["git"], record.get("ledger_git")):
        if state is not None:
            state.pop("root")  # which repository is enough; where this machine keeps it is not
    return record
