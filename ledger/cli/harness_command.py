"""`ledger lm-eval`: lm-evaluation-harness tasks against retrofitted checkpoints, written as a release
(``ledger.run.harness``) that `ledger import` and `ledger verify --import` read as evidence."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from ledger.cli.common import EXIT_OK, CommandError, out


def cmd_lm_eval(args: argparse.Namespace) -> int:
    from ledger.run.harness import HarnessError, parse_models, run_battery

    if importlib.util.find_spec("lm_eval") is None:
        raise CommandError("`ledger lm-eval` needs lm-evaluation-harness: pip install -e '.[models,harness]'")
    try:
        loops = [int(part) for part in str(args.loops).split(",") if part.strip()]
    except ValueError:
        loops = []
    if not loops or min(loops) < 1 or len(set(loops)) != len(loops):
        raise CommandError(f"--loops {args.loops}: give a loop count of 1 or more, or distinct ones (1,2,4,8)")
    if args.limit is not None and args.limit < 1:
        raise CommandError(f"--limit {args.limit}: give 1 or more documents per task")
    tasks = [task.strip() for task in args.tasks.split(",") if task.strip()]
    if not tasks:
        raise CommandError("--tasks names no task")
    if args.include_path and not Path(args.include_path).is_dir():
        raise CommandError(f"--include-path {args.include_path}: folder not found")
    try:
        models = parse_models(args.model)
        summary = run_battery(
            models,
            tasks,
            Path(args.out),
            loops=loops[0] if len(loops) == 1 else loops,
            include_path=args.include_path,
            limit=args.limit,
            num_fewshot=args.num_fewshot,
            batch_size=args.batch_size,
            device=args.device,
            release=args.name,
        )
    except HarnessError as exc:
        raise CommandError(str(exc)) from None
    for (model, task), (hits, total) in summary.accuracy.items():
        out.print(f"{model:>12}  {task:<24} {hits}/{total}", markup=False)
    out.print(f"wrote {summary.out} (release {summary.release}): `ledger import {summary.out / 'release.yaml'}`")
    return EXIT_OK


def add_parser(commands) -> None:
    harness = commands.add_parser(
        "lm-eval",
        help="run lm-evaluation-harness tasks on checkpoints at loop T, as importable evidence",
        description="Run lm-evaluation-harness tasks (on local data files: a task YAML with dataset_path json and "
        "data_files) against each --model at a fixed loop count or a sweep of them: an `ledger export` folder is "
        "read at each of --loops, a base folder once. Writes OUT/release.yaml with the rows every model read (rows/) and each model's "
        "predictions (readings/), and lm-eval's own results and per-sample logs (lm-eval/). Then `ledger import "
        "OUT/release.yaml`, or a claim file with `release: OUT/release.yaml` and `ledger verify --import`, judges "
        "paired claims on the same row ids (one arm at two loops of a sweep: `loops: [T, 1]`). Multiple-choice and "
        "generation (greedy) tasks.",
    )
    harness.add_argument(
        "--model", action="append", default=[], metavar="NAME=FOLDER", help="a model to run (repeat for several)"
    )
    harness.add_argument("--tasks", required=True, help="lm-eval task names, comma-separated")
    harness.add_argument("--include-path", help="a folder of task YAMLs (your local tasks)")
    harness.add_argument(
        "--loops",
        default="1",
        help="the loop count T for recurrent arms, or a test-recurrence sweep (1,2,4,8,16,32): each exported "
        "recurrent model read at each, its readings under readings/NAME/loopT/ (default: 1)",
    )
    harness.add_argument("--limit", type=int, help="at most this many documents per task")
    harness.add_argument("--num-fewshot", type=int, help="few-shot examples (default: the task's)")
    harness.add_argument("--batch-size", type=int, default=8, help="rows per forward (default: 8)")
    harness.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    harness.add_argument("--name", default="lm-eval", help="the release's name in the ledger (default: lm-eval)")
    harness.add_argument("--out", required=True, help="a new folder for the release")
    harness.set_defaults(handler=cmd_lm_eval)
