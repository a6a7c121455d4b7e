"""The protocol commands: schema, check, manifest, params, run, report, pretrain-base."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.table import Table
from rich.text import Text

from ledger.cli.common import EXIT_OK, EXIT_REFUSED, CommandError, _store, err, out


def cmd_schema(args: argparse.Namespace) -> int:
    from ledger.protocol.protocol import protocol_json_schema

    text = json.dumps(protocol_json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        err.print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from ledger.protocol.check import check_protocol_file

    path = Path(args.protocol)
    checked = check_protocol_file(path)  # schema, registries, bases and claims: every issue, located
    protocol = checked.protocol
    claim_files = [
        (os.path.relpath(claim_path, path.resolve().parent), claim_file)
        for claim_path, claim_file in checked.claim_files
    ]
    from ledger.rows.builder import files_to_come

    to_come = files_to_come(protocol)  # benchmark files the user puts in place before registering
    manifests = _build_or_fail(protocol, path, leave_out=to_come)
    from ledger.audit.preregistration import refuse_against_rules, refuse_unacquired, refuse_unwinnable

    # what `register` would refuse of the claims (power, acquisition, the claim rules), said before it is asked
    refuse_unwinnable(checked.claim_files, manifests)
    refuse_unacquired(checked.claim_files, manifests)
    refuse_against_rules(checked.claim_files, protocol, manifests)

    out.print(Text.assemble((protocol.name, "bold"), f" v{protocol.version}  protocol sha256 {protocol.sha256}"))
    out.print(protocol.description)
    arms = Table(title="arms", show_lines=False)
    for column in ("id", "kind", "base", "design", "stages", "evaluates"):
        arms.add_column(column)
    for arm in protocol.arms:
        arms.add_row(
            arm.id,
            arm.kind,
            f"{arm.base} ({protocol.bases[arm.base].source})",
            arm.design(),
            " -> ".join(f"{stage.id}:{stage.objective}x{stage.steps}" for stage in arm.stages) or "-",
            ", ".join(arm.evaluation.manifests),
        )
    out.print(arms)
    out.print(_manifest_table(protocol, manifests))
    for name, file in to_come.items():
        corpus = protocol.manifest(name).generator == "token_corpus"
        what = "its shards' folder" if corpus else "its file"
        checks = "hashes every shard" if corpus else "checks its questions' ids"
        out.print(
            f"manifest {name}: {what} {file} is not here yet; put it there before `ledger register`, which "
            f"{checks} and pins its rows"
        )
    gates = Table(title="gates")
    for column in ("id", "kind", "manifest", "rule", "action"):
        gates.add_column(column)
    for gate in protocol.gates:
        gates.add_row(gate.id, gate.kind, gate.manifest, gate.rule(), gate.action)
    out.print(gates)
    for relative, claim_file in claim_files:
        out.print(
            f"claims {relative}: {len(claim_file.claims)} preregistered "
            + (
                f"(claim rules {claim_file.rules}: primary {', '.join(claim_file.primary) or 'none'}, Holm across the "
                "file's other confirmatory tests)"
                if claim_file.rules >= 2
                else f"({claim_file.correction} within families; claim rules 1)"
            )
        )
    if args.random_weights and not args.dry_run:
        raise CommandError("--random-weights shapes the bases of a dry run: give --dry-run too")
    if args.memory_limit is not None and not args.random_weights:
        raise CommandError("--memory-limit bounds a dry run with random weights: give --dry-run --random-weights")
    if args.memory_limit is not None and not args.memory_limit > 0:
        raise CommandError(f"--memory-limit {args.memory_limit:g}: give a positive number of GiB")
    if args.dry_run:
        from ledger.run.dry_run import DryRunFailed, NoBase, dry_run

        with out.status("dry run: the protocol's miniature run in a throwaway ledger") as status:
            try:
                done = dry_run(
                    path,
                    progress=lambda line: status.update(f"dry run: {line}"),
                    random_weights=args.random_weights,
                    memory_limit_gib=args.memory_limit,
                )
            except NoBase as exc:
                hint = "" if args.random_weights else " (`--random-weights` builds it from its config.json alone)"
                raise CommandError(f"{path}: dry run: {exc}{hint}") from None
            except DryRunFailed as exc:
                raise CommandError(f"{path}: dry run: {exc}") from None
            except Exception as exc:  # the code cannot run this protocol: what and where, in one line
                import traceback

                where = traceback.extract_tb(exc.__traceback__)[-1]
                raise CommandError(
                    f"{path}: dry run failed: {type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
                ) from None
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
        for line in done.lines:
            out.print(f"dry run: {line}")
        outcomes = ", ".join(f"{claim} {outcome}" for claim, outcome in done.claims.items())
        out.print(
            f"dry run: {len(done.claims)} claims judged in the throwaway ledger on a handful of rows "
            f"({outcomes or 'none preregistered'}); peak memory {peak:.1f} GiB"
        )
    waiting = f" ({len(to_come)} wait for their files)" if to_come else ""
    out.print(Text.assemble(("ok", "green"), f": protocol is valid, manifests are built{waiting} and uncontaminated"))
    return EXIT_OK


def cmd_manifest(args: argparse.Namespace) -> int:
    from ledger.protocol.loader import load_protocol

    path = Path(args.protocol)
    protocol = load_protocol(path)
    manifests = _build_or_fail(protocol, path)
    out.print(_manifest_table(protocol, manifests))
    if args.out:
        folder = Path(args.out)
        for name, manifest in manifests.items():
            written = manifest.write_jsonl(folder / f"{name}.jsonl")
            out.print(f"wrote {written} ({len(manifest)} rows)")
    return EXIT_OK


def cmd_params(args: argparse.Namespace) -> int:
    from ledger.protocol.loader import load_protocol

    protocol = load_protocol(args.protocol)
    try:
        from arms.bases.loading import BaseModelNotFound
        from arms.params import protocol_params
    except ImportError as exc:  # the model extras are not installed
        raise CommandError(f"`ledger params` needs the model extras: pip install -e '.[models]' ({exc})") from None
    loops = tuple(int(t) for t in args.loops.split(","))
    try:
        rows = protocol_params(protocol, loops=loops, protocol_dir=Path(args.protocol).resolve().parent)
    except BaseModelNotFound as exc:
        raise CommandError(str(exc)) from None
    table = Table(title=f"{protocol.name}: trainable parameters (unique, tied tensors once) and inference cost")
    for column in (
        "arm",
        "kind",
        "base",
        "base unique",
        "base w/o embeddings",
        "trainable",
        "% of base",
        "detail",
        *(f"cost T={t}" for t in loops),
    ):
        table.add_column(column, justify="right" if column not in ("arm", "kind", "base", "detail") else "left")
    for row in rows:
        table.add_row(
            row.arm,
            row.kind,
            row.base,
            f"{row.base_unique:,}",
            f"{row.base_non_embedding:,}",
            f"{row.trainable:,}",
            f"{100 * row.trainable / row.base_unique:.2f}%",
            row.detail,
            *(f"{row.cost_by_loops[t]:.2f}x" if row.cost_by_loops else "1.00x" for t in loops),
        )
    out.print(table)
    _print_training_flops(protocol, rows, loops)
    noted: dict[str, list[str]] = {}  # each kind's note on its cost columns, after the arms it concerns
    for row in rows:
        if row.cost_note:
            noted.setdefault(row.cost_note, []).append(row.arm)
    for note, arms in noted.items():
        out.print(f"{', '.join(arms)}: {note}")
    return EXIT_OK


def _print_training_flops(protocol, rows, loops) -> None:
    """`ledger params`' second table: what each recurrent arm keeps of its base and its training FLOPs per token."""
    from rich import box

    recurrent = [row for row in rows if row.retrofit is not None]
    if not recurrent:
        return
    # A box without vertical rules: a reader that keys the first table's rows by arm on their "│" cells
    # (tests/run/test_params_cli.py) still finds that table's row, not this one's.
    table = Table(
        title=f"{protocol.name}: the retrofit without embeddings and its training FLOPs per token, 6 N1 + 2 N2",
        box=box.SIMPLE_HEAD,
    )
    for column in ("arm", "s", "retrofit w/o embeddings", "bridge/adapter", "kept of base", "base 6N"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for t in loops:
        table.add_column(f"train T={t}", justify="right")
    for row in recurrent:
        retrofit = row.retrofit
        for s, flops in retrofit.training_flops:
            table.add_row(
                row.arm,
                "T" if s is None else str(s),
                f"{retrofit.non_embedding:,}",
                f"{retrofit.bridge:,}",
                f"{retrofit.kept:,} ({100 * retrofit.kept_share:.2f}%)",
                _flops(row.base_flops_per_token),
                *(f"{_flops(flops[t])} ({flops[t] / row.base_flops_per_token:.2f}x)" for t in loops),
            )
    out.print(table)
    out.print(
        "train T=t: one step at t iterations, the last s with gradient (N1) and the rest forward-only (N2), "
        "against the fixed-depth base's 6 N (embeddings excluded, every tensor counted once). s: the stages' "
        "poisson_lognormal backprop_depth (T: forced recurrence, every iteration with gradient). kept of base: the "
        "base's own parameters the retrofit runs (dropped layers and the bridge excluded), as a share of the base "
        "without embeddings."
    )
    for note in dict.fromkeys(row.retrofit.note for row in recurrent if row.retrofit.note):
        out.print(note)


def _flops(value: float) -> str:
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def cmd_run(args: argparse.Namespace) -> int:
    if args.no_progress:  # the model library's own bars too (loading weights, de-quantising a GGUF):
        os.environ["TQDM_DISABLE"] = "1"  # tqdm reads it once, when first imported, which is below
    try:
        from ledger.run.bases import BaseUnavailable, RunRefused
        from ledger.run.run_pass import RunPass
        from ledger.run.runner import Runner
    except ImportError as exc:
        raise CommandError(f"`ledger run` needs the model extras: pip install -e '.[models]' ({exc})") from None
    from ledger.audit.refusals import RegistrationRefused
    from ledger.cli.transparency_commands import SIGNING_KEY_ENV, load_signing_key
    from ledger.protocol.project import ledgers_to_consult
    from ledger.store import StoreError

    if args.executor == "slurm":  # before anything is read or written
        from ledger.run.slurm import SlurmUnavailable, require_slurm

        if args.parallel is not None or args.no_judge or args.judge_only:
            raise CommandError("--executor slurm submits every arm and the judging itself: drop --parallel, "
                               "--no-judge and --judge-only")  # fmt: skip
        if args.gpus_per_job is not None and args.gpus_per_job < 0:
            raise CommandError(f"--gpus-per-job wants a number of GPUs >= 0, got {args.gpus_per_job}")
        try:
            require_slurm()
        except SlurmUnavailable as exc:
            raise CommandError(str(exc)) from None
    key_file = os.environ.get(SIGNING_KEY_ENV, "").strip()
    signing_key = load_signing_key(key_file) if key_file and not args.no_judge else None  # bad key: before any write
    arms = [arm.strip() for arm in args.arms.split(",")] if args.arms else None
    try:
        runner = Runner(
            args.protocol,
            db=args.db,
            out=args.out,
            resume=args.resume,
            arms=arms,
            progress=not args.no_progress,
            device=args.device,
            compile_choice=args.compile,
            artifacts=args.artifacts,
            judge=not args.no_judge,
            also_db=ledgers_to_consult(args.protocol, args.also_db),  # with ledger-project.yaml's tuning ledgers
        )
        if args.executor == "slurm":
            return _submit_to_slurm(runner, args)
        this_pass = RunPass(judge_only=args.judge_only)
        if args.parallel is not None:
            _run_children(runner, args)
            # every arm is recorded now: this pass judges the claims and reports
            this_pass = RunPass(resume=True, judging_pass=True, judge_only=args.judge_only)
        result = runner.run(this_pass)
        if result is None:  # a data-parallel rank other than 0: rank 0 prints and records
            return EXIT_OK
    except BaseUnavailable as exc:
        raise CommandError(str(exc)) from None
    except (RunRefused, RegistrationRefused) as exc:
        raise CommandError(f"refused: {exc}", EXIT_REFUSED) from None
    except (ValueError, StoreError) as exc:  # an --also-db that cannot be read; a bad ledger-project.yaml
        raise CommandError(str(exc)) from None
    _print_run_summary(result)
    if result.judged:
        _publish_head(args, result, signing_key)
    return EXIT_REFUSED if result.hard_stopped else EXIT_OK


def _publish_head(args: argparse.Namespace, result, signing_key) -> None:
    """The ledger's head after the run, into the run folder (``head.txt``; signed: ``head.signed``): what the
    researcher publishes with the claims, so that an auditor can prove a later ledger extends it. Beside it
    the protocol's fingerprint (``fingerprint.json``), which ``ledger compare`` holds a reproduction against."""
    from ledger.audit.fingerprint import fingerprint, write_fingerprint
    from ledger.cli.transparency_commands import signed_head_of

    with _store(args, read_only=True) as store:
        root, size = store.head()
        signed = signed_head_of(store, signing_key) if signing_key is not None else None
        document = fingerprint(store, [result.protocol.name])
    write_fingerprint(document, result.out_dir)
    (result.out_dir / "head.txt").write_text(f"{root}:{size}\n", encoding="utf-8")
    if signed is None:
        out.print(
            f"ledger head {root}:{size} (in {result.out_dir / 'head.txt'}; to publish a signed head: "
            "`ledger head --sign KEY`, or set LEDGER_SIGNING_KEY before the run)",
            markup=False,
        )
        return
    (result.out_dir / "head.signed").write_text(signed, encoding="utf-8")
    out.print(
        f"ledger head {root}:{size}, signed by {signing_key.name}: {result.out_dir / 'head.signed'} (publish it "
        "with the claims and the public key)",
        markup=False,
    )


def _submit_to_slurm(runner, args: argparse.Namespace) -> int:
    """Register, submit the jobs, print their ids and logs; the jobs run ``ledger run`` with these options."""
    from ledger.run.slurm import SlurmOptions, SlurmUnavailable, submit
    from ledger.store import default_db_url

    run_args = ["run", str(Path(args.protocol).resolve()), "--out", str(runner.out_dir.resolve())]
    run_args += ["--db", runner.db or default_db_url(), "--no-progress"]
    run_args += ["--artifacts", args.artifacts] if args.artifacts else []
    run_args += ["--device", args.device] if args.device else []
    run_args += ["--compile", args.compile] if args.compile != "auto" else []
    for url in args.also_db or []:
        run_args += ["--also-db", url]
    gpus = args.gpus_per_job
    if gpus is None:
        gpus = 0 if (args.device or runner.device_choice or "auto") == "cpu" else 1
    options = SlurmOptions(args.partition, gpus, args.time, args.cpus_per_job, list(args.sbatch_option or []))
    try:
        submit(runner, run_args, options, lambda line: out.print(line, markup=False))
    except SlurmUnavailable as exc:
        raise CommandError(str(exc)) from None
    return EXIT_OK


def _run_children(runner, args: argparse.Namespace) -> None:
    from ledger.run.parallel import ParallelFailed, run_parallel
    from ledger.run.run_pass import RunPass

    if args.parallel < 1:
        raise CommandError(f"--parallel wants a number of processes >= 1, got {args.parallel}")
    from ledger.store import default_db_url

    # The children start at once: they import the libraries while this process reads the manifests and
    # registers the protocol (one registration at a time, under the store's lock; a child finds it registered).
    url = runner.db or default_db_url()
    every_arm = list(runner.arm_ids)

    def run_here(group: list[str], device: str | None, threads: int) -> None:
        """The heaviest group trains in this process (imports, manifests and bases read once, warm for judging)."""
        import torch

        if not os.environ.get("OMP_NUM_THREADS"):  # the children's share of the cores (run_parallel)
            torch.set_num_threads(threads)
            os.environ["OMP_NUM_THREADS"] = str(threads)
        # the variables as the children's are set, so that their runs and this process's record one environment
        os.environ["MKL_NUM_THREADS"] = str(threads)
        runner.run(RunPass(arm_ids=tuple(group), judge=False, device=device))

    try:
        run_parallel(
            runner.protocol_path,
            runner.protocol,
            every_arm,
            args.parallel,
            db=url,
            out_dir=runner.out_dir,
            device=args.device,
            artifacts=args.artifacts,
            resume=args.resume,
            compile_choice=args.compile,
            report=lambda line: out.print(line, markup=False),
            run_here=run_here,
            on_core_free=runner.warm,
        )
    except ParallelFailed as exc:
        raise CommandError(str(exc)) from None


def seed_spreads(result) -> list[str]:
    """One line per arm replicated over training seeds: each manifest's accuracy per seed, their mean and the
    between-seed spread (what one training run cannot show)."""
    outcomes = {arm.arm: arm for arm in result.arms}
    names = dict.fromkeys(arm.replicate.of for arm in result.protocol.arms if arm.replicate is not None)
    lines = []
    for name in names:
        replicates = [arm for arm in result.protocol.replicates_of(name) if arm.id in outcomes]
        manifests = dict.fromkeys(m for arm in replicates for m in outcomes[arm.id].accuracy)
        for manifest in manifests:
            values = []
            for arm in replicates:
                correct, total = outcomes[arm.id].accuracy.get(manifest, (0, 0))
                if total and arm.replicate is not None:
                    values.append((arm.replicate.seed, correct / total))
            if len(values) < 2:
                continue
            accuracies = [value for _, value in values]
            mean = sum(accuracies) / len(accuracies)
            lines.append(
                f"{name} over {len(values)} training seeds on {manifest}: accuracy "
                + ", ".join(f"seed {seed} {value:.3f}" for seed, value in values)
                + f"; mean {mean:.3f}, between-seed spread {min(accuracies):.3f}-{max(accuracies):.3f} "
                f"({max(accuracies) - min(accuracies):.3f})"
            )
    return lines


def _print_run_summary(result) -> None:
    """The claims and their outcomes first (each naming its arms' designs: which bridge, which re-entry), then the
    arms; the captions are the registered description, where a protocol states how it departs from the paper."""
    designs = {arm.id: arm.design() for arm in result.protocol.arms}
    for arm in result.protocol.arms:  # an arm written with seeds: claims name it, its replicates share its design
        if arm.replicate is not None:
            seeds = len(result.protocol.replicates_of(arm.replicate.of))
            designs.setdefault(arm.replicate.of, f"{arm.design()}; {seeds} training seeds")
    if result.claims:
        from ledger.audit.verdicts import Tally

        claims = Table(
            title=f"preregistered claims: {Tally.of(result.claims).line()}",
            caption=result.protocol.description,
        )
        for column in ("claim", "outcome", "the paper", "arms (design)", "integrity", "figures"):
            claims.add_column(column, overflow="fold")
        for verdict in result.claims:
            arms = "; ".join(
                f"{arm} ({designs[arm]})" if arm in designs else f"{arm} (the base, loop 1)" for arm in verdict.subjects
            )
            paper = "-" if verdict.paper is None else f"{verdict.paper['outcome']}: {verdict.paper['figure']}"
            claims.add_row(verdict.claim_id, verdict.outcome, paper, arms or "-", verdict.integrity, verdict.reason)
        out.print(claims)
    table = Table(title=f"{result.protocol.name} ({result.protocol_sha256[:12]}): arms")
    for column in (
        "arm",
        "status",
        "accuracy (final loop; manifest@loop: at that loop)",
        "tail (top 4 depths)",
        "gates",
        "design",
    ):
        table.add_column(column, overflow="fold")
    for arm in result.arms:
        accuracy = (
            "; ".join(
                [f"{m} {c}/{n} = {c / n:.3f}" for m, (c, n) in arm.accuracy.items() if n]
                + [f"{m} {loss:.3f} nats/token" for m, loss in arm.losses.items()]
            )
            or "-"
        )
        tail = "; ".join(f"{m} {c}/{n} = {c / n:.3f}" for m, (c, n) in arm.tail.items() if n) or "-"
        gates = "; ".join(f"{g['gate']} {'pass' if g['passed'] else 'FAIL'} ({g['action']})" for g in arm.gates) or "-"
        status = arm.status if not arm.note else f"{arm.status}: {arm.note}"
        table.add_row(arm.arm, status, accuracy, tail, gates, designs.get(arm.arm, "-"))
    out.print(table)
    for line in seed_spreads(result):
        out.print(line, markup=False)
    if not result.judged:
        out.print("claims and report: not judged here (--no-judge); `ledger run --resume` judges them and reports")
    elif result.claims_waiting_for and result.protocol.claims:
        out.print(
            f"claims not judged yet: arm(s) {', '.join(result.claims_waiting_for)} have not finished in this "
            "ledger; run them (--arms), then `ledger run --resume` or `ledger verify` judges the claims"
        )
    if result.versions:
        out.print("; ".join(result.versions), markup=False)
    if result.report is not None:
        out.print(f"report: {result.report}")
    out.print(f"log: {result.out_dir / 'run.log'}")


def cmd_report(args: argparse.Namespace) -> int:
    from ledger.report.html import report_for_protocol_name

    with _store(args, read_only=True) as store:
        try:
            path = report_for_protocol_name(
                store, args.name, Path(args.out) if args.out else Path("runs") / args.name, version=args.version
            )
        except LookupError as exc:  # no such protocol, or no such version of it
            raise CommandError(str(exc).strip("'\"")) from None
    out.print(f"report: {path}")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from ledger.audit.preregistration import registration_of
    from ledger.audit.refusals import RegistrationRefused
    from ledger.protocol.check import ProtocolError, check_protocol_file
    from ledger.run.status import arm_states

    try:
        protocol = check_protocol_file(Path(args.protocol)).protocol
    except ProtocolError as exc:
        raise CommandError(str(exc)) from None
    out_dir = Path(args.out) if args.out else Path("runs") / protocol.name
    with _store(args, create=False, read_only=True) as store:
        try:
            sha = registration_of(store, protocol)
        except RegistrationRefused as exc:
            raise CommandError(f"{args.protocol}: {exc}") from None
        states, judging = arm_states(store, protocol, sha, out_dir)
    rows = states + ([judging] if judging else [])
    if args.json:
        print(json.dumps([vars(state) for state in rows], indent=2))
        return EXIT_OK
    table = Table(title=f"{protocol.name} ({sha[:12]}): {sum(s.state == 'finished' for s in states)} of "
                        f"{len(states)} arms finished")  # fmt: skip
    for column in ("arm", "state", "job", "detail"):
        table.add_column(column, overflow="fold")
    for state in rows:
        table.add_row(state.arm, state.state, state.job or "-", state.detail)
    out.print(table)
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    try:
        from ledger.run.export import ExportRefused, export_checkpoint
    except ImportError as exc:
        raise CommandError(f"`ledger export` needs the model extras: pip install -e '.[models]' ({exc})") from None
    out_dir = Path(args.out)
    if out_dir.exists():
        raise CommandError(f"--out {out_dir} exists: choose a new folder")
    with _store(args, read_only=True) as store:
        try:
            path = export_checkpoint(
                store,
                args.checkpoint,
                out_dir,
                list(args.artifacts or []),
                format=args.format,
                num_loops=args.num_loops,
            )
        except (ExportRefused, ValueError) as exc:
            raise CommandError(str(exc)) from None
    out.print(f"exported: {path}" + (" (a Hugging Face model folder)" if args.format == "hf" else ""))
    return EXIT_OK


def cmd_pretrain_base(args: argparse.Namespace) -> int:
    try:
        from arms.bases.pretrain import pretrain_base
    except ImportError as exc:
        raise CommandError(
            f"`ledger pretrain-base` needs the model extras: pip install -e '.[models]' ({exc})"
        ) from None
    try:  # a bad recipe raises ProtocolError, which main() prints as located issues
        summary = pretrain_base(args.recipe, args.out, max_steps=args.max_steps, progress=not args.no_progress)
    except (ValueError, FileExistsError) as exc:
        raise CommandError(str(exc)) from None
    out.print_json(data=summary)
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from ledger.protocol.starter import StarterError, write_starter

    try:
        protocol, claims = write_starter(args.model, args.template, Path(args.out_dir), args.name, args.seed)
    except StarterError as exc:
        raise CommandError(str(exc)) from None
    out.print(f"wrote {protocol}")
    out.print(f"wrote {claims}")
    out.print("the choices marked TUNE are the template's: tune them on the dev rows before you register")
    out.print(f"next: ledger check {protocol} --dry-run")
    return EXIT_OK


# ----------------------------------------------------------------------------- helpers


def _build_or_fail(protocol, path: Path, leave_out=()):
    from ledger.rows.builder import build_manifests
    from ledger.rows.contamination import ContaminationError

    try:
        return build_manifests(protocol, leave_out=leave_out)
    except ContaminationError as exc:
        raise CommandError(f"{path}: manifests: {exc}") from None
    except ValueError as exc:
        raise CommandError(f"{path}: manifests: {exc}") from None


def _manifest_table(protocol, manifests) -> Table:
    table = Table(title="manifests")
    for column in ("id", "role", "generator", "rows"):
        table.add_column(column)
    table.add_column("sha256", no_wrap=True, min_width=64)
    for spec in protocol.manifests:
        manifest = manifests.get(spec.id)
        if manifest is None:  # a benchmark file not in place yet
            table.add_row(spec.id, spec.role, spec.describe(), "-", "its file is not here yet")
        else:
            table.add_row(spec.id, spec.role, spec.describe(), str(len(manifest)), manifest.sha256)
    return table
