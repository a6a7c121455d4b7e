"""What a run records of the machine and code it ran on (the ``runs.environment`` of each run).

* every installed distribution and its version, and the lock they match (``requirements/*.lock``
  beside the ledger's source: its file, SHA-256 and any pin not met; ``ledger/environment.py``);
* the project's git commit and whether its tree was dirty (the repository holding the protocol
  file; the ledger's own source too when that is another repository);
* Python, the platform, the machine and its CPU model;
* torch's build: the CPU capability it dispatches to, its BLAS and LAPACK, oneDNN and its parallel
  backend; CUDA and cuDNN, and every visible GPU;
* the threads (torch's intra- and inter-op counts and the environment variables that set them) and
  the determinism settings (deterministic algorithms, cuDNN, TF32, float32 matmul precision);
* the device the arms ran on, its name and the protocol's dtype;
* every ``LEDGER_*`` variable that was set (``ledger/variables.py``) and the plugins imported.

Nothing here fails a run: a value that cannot be read (no git, no CUDA) is recorded as ``None``,
which says exactly that. ``current_environment()`` is the same record for the process asking, so
``verify``, ``run --resume`` and ``compare`` can say how a recorded run's environment differs.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from ledger.environment import lock_record, normalise
from ledger.plugins import plugin_modules
from ledger.variables import recorded_variables

# The packages the report's environment table names; every distribution is recorded.
PACKAGES = ("ledger", "torch", "transformers", "peft", "safetensors", "accelerate")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ATEN_CPU_CAPABILITY")
DETERMINISM_VARIABLES = ("CUBLAS_WORKSPACE_CONFIG", "PYTHONHASHSEED")
LOCK_FOLDER = Path(__file__).resolve().parents[2] / "requirements"  # beside the source of an editable install


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


@functools.cache
def installed_distributions() -> dict[str, str]:
    """``{normalised name: version}`` of every distribution this interpreter can import from (the first
    found of a name wins, as the import system's path order decides)."""
    found: dict[str, str] = {}
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            found.setdefault(normalise(name), distribution.version)
    return dict(sorted(found.items()))


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or None


def torch_build(torch: Any) -> dict[str, Any]:
    """The parts of torch's build that decide its CPU arithmetic."""
    shown = torch.__config__.show()

    def setting(name: str) -> str | None:
        found = re.search(rf"\b{name}=([^,\s]+)", shown)
        return found.group(1) if found else None

    def line_with(*words: str) -> str | None:
        for line in shown.splitlines():
            if all(word in line for word in words):
                return line.strip(" -")
        return None

    parallel = re.search(r"ATen parallel backend: (\S+)", torch.__config__.parallel_info())
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "blas": setting("BLAS_INFO"),
        "lapack": setting("LAPACK_INFO"),
        "mkl": line_with("Math Kernel Library"),
        "onednn": line_with("MKL-DNN") or line_with("oneDNN"),
        "parallel": parallel.group(1) if parallel else None,
        "commit": setting("COMMIT_SHA"),
    }


def determinism(torch: Any) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic) if cuda else None,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if cuda else None,
        "cuda_matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32) if cuda else None,
        "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32) if cuda else None,
        **{name: os.environ.get(name) for name in DETERMINISM_VARIABLES},
    }


def environment_record(project_folder: Path, device: dict[str, Any]) -> dict[str, Any]:
    """The environment of a run whose protocol lives in ``project_folder``, on ``device``
    (``arms.device.describe``: device, device_name, dtype)."""
    return {**current_environment(project_folder), **device}


def current_environment(project_folder: Path | None = None) -> dict[str, Any]:
    """This process's environment record (without an arm's device). torch's part is read only where
    torch is installed: an auditor's ``ledger verify`` needs none, and says so."""
    record = copy.deepcopy(_machine_and_code(project_folder.resolve() if project_folder else None))
    record["ledger_variables"] = recorded_variables()  # read at every record, as the threads are
    if importlib.util.find_spec("torch") is None:
        record.update(torch=None, torch_build=None, threads=None, interop_threads=None, determinism=None)
        return record
    import torch

    cuda = torch.cuda.is_available()
    record.update(
        torch=torch.__version__,
        torch_build=_torch_build_once(),
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version() if cuda else None,
        gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        # read at every record: --parallel sets a process's threads after it starts
        threads=torch.get_num_threads(),
        interop_threads=torch.get_num_interop_threads(),
        determinism=determinism(torch),
    )
    return record


@functools.cache
def _torch_build_once() -> dict[str, Any]:
    import torch

    return torch_build(torch)


@functools.cache  # git and the package metadata are read once per process, not once per arm
def _machine_and_code(project_folder: Path | None) -> dict[str, Any]:
    distributions = installed_distributions()
    project = git_state(project_folder) if project_folder is not None else None
    source = git_state(Path(__file__).resolve().parent)
    record: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "thread_env": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "packages": package_versions(),
        "distributions": distributions,
        "lock": lock_record(LOCK_FOLDER, distributions),
        "git": project,
        "plugins": plugin_modules(),  # imported once, by the command's start
    }
    if source is not None and (project is None or source["root"] != project["root"]):
        record["ledger_git"] = source
    for state in (record["git"], record.get("ledger_git")):
        if state is not None:
            state.pop("root")  # which repository is enough; where this machine keeps it is not
    return record
