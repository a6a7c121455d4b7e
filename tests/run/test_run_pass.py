"""A pass of a run says what it does (``RunPass``): the arms it trains, whether it judges, resumes, and where it
runs, each as the runner was built where the pass leaves it open. The CLI hands each pass to ``Runner.run`` and
sets no field of a runner between passes."""

from __future__ import annotations

import ast
from pathlib import Path

from run_helpers import ROOT, SMOKE

from ledger.run.run_pass import RunPass
from ledger.run.runner import Runner


def _runner(**options) -> Runner:
    return Runner(SMOKE, db=None, out=None, resume=False, arms=None, **options)


def test_a_pass_says_what_it_changes_and_leaves_the_rest_as_built():
    runner = _runner(judge=True, device="cpu")
    every = [arm.id for arm in runner.protocol.arms]
    assert (runner.arm_ids, runner.judge, runner.resume, runner.device_choice) == (every, True, False, "cpu")
    runner._begin(RunPass(arm_ids=(every[0],), judge=False, device="meta"))
    assert (runner.arm_ids, runner.judge, runner.resume, runner.device_choice) == ([every[0]], False, False, "meta")
    runner._begin(RunPass(resume=True, judging_pass=True))  # the judging pass after --parallel: every arm again
    assert (runner.arm_ids, runner.judge, runner.resume, runner.device_choice) == (every, True, True, "cpu")
    assert runner.judging_pass and not runner.judge_only


def test_the_cli_sets_no_field_of_a_runner():
    assigned = []
    for path in sorted((ROOT / "ledger" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for target in targets:
                for leaf in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (
                        isinstance(leaf, ast.Attribute)
                        and isinstance(leaf.value, ast.Name)
                        and leaf.value.id == "runner"
                    ):
                        assigned.append(f"{Path(path).name}:{node.lineno} runner.{leaf.attr}")
    assert not assigned, assigned
