"""Shared test set-up.

The README's test command runs the suite on two pytest-xdist workers (one per core of
the reference machine). Each worker then gets one compute thread, and so do the
`ledger` subprocesses it starts (they inherit OMP_NUM_THREADS): two workers each
asking torch for every core would only fight over them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Shared helpers (model_fixtures, store_helpers) live in tests/ itself; test files sit in
# subfolders that mirror the packages.
sys.path.insert(0, str(Path(__file__).resolve().parent))

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    try:
        import torch
    except ImportError:  # the ledger's own tests run without torch
        pass
    else:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_reference():
    """The released row-level results beside the checkout (``../shared/reference/recurrent-qwen-svgd``): a
    test that needs them fails when they are absent, it does not skip."""
    from pathlib import Path

    for parent in Path(__file__).resolve().parents:
        found = parent / "shared" / "reference" / "recurrent-qwen-svgd"
        if (found / "phase_a").exists():
            return found
    pytest.fail(
        "the released reference data is missing: expected ../shared/reference/recurrent-qwen-svgd beside the "
        "checkout (clone the repository next to shared/)",
        pytrace=False,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """An empty ledger database URL, once per backend (tests/databases.py: PostgreSQL needs
    LEDGER_TEST_POSTGRES_URL, which `bash tests/run.sh` sets; without it those cases fail)."""
    from databases import fresh_database

    with fresh_database(request.param, tmp_path) as url:
        yield url


# The longest files, longest first (measured with --durations): handed out first, they spread over
# both workers instead of one of them ending the run alone.
LONGEST_FIRST = (
    "test_phaseA_tiny.py",  # the README's first command end to end (`-m long`, about 12 min)
    "test_slurm.py",  # the long call's next longest, then the default suite's
    "test_designM_tiny.py",
    "test_runner.py",
    "test_compiled_block.py",
    "test_claim_scope.py",  # four runs into one ledger (about 2 min)
    "test_pinned_hashes.py",
    "test_gpu_check.py",
    "test_distributed.py",
    "test_lm_eval_harness.py",
    "test_check_property.py",
    "test_phaseA_tiny_setup.py",
    "test_rehash_lineage.py",
    "test_export_hf.py",
    "test_export.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


def pytest_configure(config):
    # xdist's loadfile hands out the files with the most tests first by default, which put
    # the few-test long files last; keep the order pytest_collection_modifyitems sets.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# Nothing is skipped (tests/no_skips.py): a skip is reported as a failure that names `bash tests/run.sh`.
from no_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401
