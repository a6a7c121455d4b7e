"""A pytest plugin: nothing in this suite is skipped.

Every tool a test needs is one that `bash tests/run.sh` installs, so a skip (``pytest.skip``, ``importorskip``,
``skipif``) could only hide a check that did not run. Each is reported as a failure with its reason and that
command. The suite's conftest imports the two hooks; ``pytest -p no_skips`` loads them anywhere.
"""

from __future__ import annotations

import pytest

INSTALL_HINT = "bash tests/run.sh installs what the tests need"


def _skip_reason(longrepr) -> str:
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def _fail_skipped(report) -> None:
    report.outcome = "failed"
    reason = _skip_reason(report.longrepr).removeprefix("Skipped: ")
    report.longrepr = f"skipped, which this suite does not allow: {reason} ({INSTALL_HINT})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        _fail_skipped(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    report = (yield).get_result()
    if report.skipped:  # a module-level importorskip
        _fail_skipped(report)
