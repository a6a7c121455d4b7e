"""The ``ledger`` command line.

Exit codes (shared by every command):
  0  success
  2  bad input: a protocol, claim file or argument that cannot be used (located message, no traceback)
  3  refused by the ledger (lineage, preregistration, a changed protocol, a write in `query`)
``ledger verify`` adds: 1 an outcome differs from the first recorded one (or a new claim is
not supported), 4 something is tampered, 5 something is unverifiable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3

out = Console(highlight=False)
if not out.is_terminal:  # piped or captured: no 80-column squeeze, hashes stay whole
    out = Console(highlight=False, width=200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class CommandError(Exception):
    """A user-facing failure: printed without a traceback, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------- commands


def cmd_schema(args: argparse.Namespace) -> int:
    from ledger.spec.protocol import protocol_json_schema

    text = json.dumps(protocol_json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        err.print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from ledger.spec.check import check_protocol_file

    path = Path(args.protocol)
    checked = check_protocol_file(path)  # schema, registries, bases and claims: every issue, located
    protocol = checked.protocol
    claim_files = [(os.path.relpath(claim_path, path.resolve().parent), claim_file)
                   for claim_path, claim_file in checked.claim_files]
    manifests = _build_or_fail(protocol, path)

    out.print(f"[bold]{protocol.name}[/bold] v{protocol.version}  protocol sha256 {protocol.sha256}")
    out.print(protocol.description)
    arms = Table(title="arms", show_lines=False)
    for column in ("id", "kind", "base", "design", "stages", "evaluates"):
        arms.add_column(column)
    for arm in protocol.arms:
        arms.add_row(
            arm.id,
            arm.kind,
            f"{arm.base} ({protocol.bases[arm.base].source})",
            _arm_design(arm),
            " -> ".join(f"{stage.id}:{stage.objective}x{stage.steps}" for stage in arm.stages) or "-",
            ", ".join(arm.evaluation.manifests),
        )
    out.print(arms)
    out.print(_manifest_table(protocol, manifests))
    gates = Table(title="gates")
    for column in ("id", "kind", "manifest", "rule", "action"):
        gates.add_column(column)
    for gate in protocol.gates:
        gates.add_row(gate.id, gate.kind, gate.manifest, _gate_rule(gate), gate.action)
    out.print(gates)
    for relative, claim_file in claim_files:
        out.print(f"claims {relative}: {len(claim_file.claims)} preregistered ({claim_file.correction} within families)")
    if args.dry_run:
        from ledger.run.dry_run import dry_run

        with out.status("dry run: every arm built, one training step per stage") as status:
            steps = dry_run(protocol, path.resolve().parent, progress=lambda line: status.update(f"dry run: {line}"))
        out.print(f"dry run: {len(steps)} steps ran ({', '.join(steps)})")
    out.print("[green]ok[/green]: protocol is valid, manifests are built and uncontaminated")
    return EXIT_OK


def cmd_manifest(args: argparse.Namespace) -> int:
    from ledger.spec.loader import load_protocol

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


def _store(args: argparse.Namespace, create: bool = True):
    from ledger.store import SchemaVersionMismatch, StoreError, default_db_url, open_store

    url = args.db or default_db_url()
    if url.startswith("sqlite:///") and create:
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        return open_store(url, create=create)
    except SchemaVersionMismatch as exc:
        raise CommandError(str(exc), EXIT_REFUSED) from None
    except StoreError as exc:
        raise CommandError(f"{url}: {exc}") from None


def cmd_register(args: argparse.Namespace) -> int:
    from ledger.audit.preregistration import RegistrationRefused, register
    from ledger.spec.check import check_protocol_file

    check_protocol_file(args.protocol)  # refused before the database is opened (or created)
    with _store(args) as store:
        try:
            registration = register(store, args.protocol)
        except RegistrationRefused as exc:
            raise CommandError(str(exc), EXIT_REFUSED) from None
        verb = "already registered" if registration.already else "registered"
        out.print(f"{verb}: {registration.protocol.name} v{registration.protocol.version} {registration.sha256}")
        for name, sha in registration.manifests.items():
            out.print(f"  manifest {name}: {sha}")
        out.print(f"  {len(registration.claims)} claims preregistered")
        root, size = store.head()
        out.print(f"ledger head {root}:{size}")
    return EXIT_OK


def cmd_deviate(args: argparse.Namespace) -> int:
    from ledger.audit.preregistration import RegistrationRefused, deviate
    from ledger.spec.check import check_protocol_file

    check_protocol_file(args.protocol)
    with _store(args) as store:
        try:
            old, new, changes = deviate(store, args.protocol, reason=args.reason, timing=args.timing)
        except RegistrationRefused as exc:
            raise CommandError(str(exc), EXIT_REFUSED) from None
        out.print(f"deviation recorded: {old[:12]} -> {new[:12]} ({args.timing}: {args.reason})")
        for item, planned, actual in changes:
            out.print(f"  {item}: planned {planned!r}, actual {actual!r}", markup=False)
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from ledger.audit.importer import import_release
    from ledger.audit.release import ReleaseError

    with _store(args) as store:
        try:
            summary = import_release(store, args.mapping, args.root)
        except ReleaseError as exc:
            raise CommandError(str(exc)) from None
        out.print(f"{'already imported' if summary.already else 'imported'}: {summary.release} {summary.protocol_sha256}")
        for name, (rows, sha) in summary.manifests.items():
            out.print(f"  manifest {name}: {rows} rows {sha}")
        for what, count in summary.evidence.items():
            out.print(f"  evidence {what}: {count}")
        for name in summary.counts:
            out.print(f"  per-depth counts {name}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from ledger.audit.recording import import_external, record_outcomes
    from ledger.audit.release import ReleaseError
    from ledger.audit.verify import verify

    since = None
    if args.since_head:
        root, _, size = args.since_head.rpartition(":")
        if not root or not size.isdigit():
            raise CommandError(f"--since-head wants ROOT:SIZE as printed by `ledger head`, got {args.since_head!r}")
        since = (root, int(size))
    paths = args.paths or ["claims"]
    # Only an explicit --import may create a ledger (as `ledger import` does); verify alone reads.
    with _store(args, create=args.import_releases) as store:
        try:
            if args.import_releases:
                import_external(store, paths, args.root)
            report = verify(store, paths, root=args.root, since_head=since)
            if args.record:
                record_outcomes(store, report)
                report.head = store.head()
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from None
        except ReleaseError as exc:
            raise CommandError(str(exc)) from None
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
        return report.exit_code
    for problem in report.chain_problems:
        err.print(f"chain: {problem}", markup=False)
    for error in report.errors:
        err.print(error, markup=False)
    table = Table(title=f"claims ({len(report.verdicts)})")
    for column in ("claim", "outcome", "integrity", "first", "figures / reason"):
        table.add_column(column, overflow="fold")
    for verdict in report.verdicts:
        colour = "green" if verdict.ok else "red"
        detail = verdict.reason
        if verdict.problems:
            detail += "\n" + "\n".join(f"! {problem}" for problem in verdict.problems)
        if verdict.flags:
            detail += "\n" + "\n".join(f"~ {flag}" for flag in verdict.flags)
        table.add_row(
            verdict.claim_id, f"[{colour}]{verdict.outcome}[/{colour}]", verdict.integrity,
            verdict.first_outcome or "(new)", detail,
        )
    out.print(table)
    if report.since_head:
        out.print(f"since head: {report.since_head}", markup=False)
    out.print(f"ledger head {report.head[0]}:{report.head[1]}")
    out.print("[green]verified[/green]" if report.exit_code == 0 else f"[red]exit {report.exit_code}[/red]")
    return report.exit_code


def cmd_head(args: argparse.Namespace) -> int:
    with _store(args, create=False) as store:
        root, size = store.head()
    out.print(f"{root}:{size}")
    return EXIT_OK


def cmd_query(args: argparse.Namespace) -> int:
    from ledger.store import ReadOnlyViolation

    with _store(args, create=False) as store:
        try:
            result = store.query(args.sql)
        except ReadOnlyViolation as exc:
            raise CommandError(f"refused: {exc}", EXIT_REFUSED) from None
        except Exception as exc:  # SQL errors are the user's input
            raise CommandError(f"query failed: {str(exc).splitlines()[0]}") from None
    frame = result.to_dataframe()
    if args.format == "csv":
        sys.stdout.write(frame.to_csv(index=False))
    elif args.format == "json":
        sys.stdout.write(frame.to_json(orient="records", indent=2) + "\n")
    else:
        table = Table()
        for column in frame.columns:
            table.add_column(str(column))
        for row in frame.itertuples(index=False):
            table.add_row(*("" if value is None else str(value) for value in row))
        out.print(table)
    return EXIT_OK


def cmd_params(args: argparse.Namespace) -> int:
    from ledger.spec.loader import load_protocol

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
    for column in ("arm", "kind", "base", "base unique", "base w/o embeddings", "trainable", "% of base", "detail",
                   *(f"cost T={t}" for t in loops)):
        table.add_column(column, justify="right" if column not in ("arm", "kind", "base", "detail") else "left")
    for row in rows:
        table.add_row(
            row.arm, row.kind, row.base, f"{row.base_unique:,}", f"{row.base_non_embedding:,}", f"{row.trainable:,}",
            f"{100 * row.trainable / row.base_unique:.2f}%", row.detail,
            *(f"{row.cost_by_loops[t]:.2f}x" if row.cost_by_loops else "1.00x" for t in loops),
        )
    out.print(table)
    answer_only = [arm.id for arm in protocol.arms if getattr(getattr(arm, "bridge", None), "reentry", "all") == "answer"]
    if answer_only:
        out.print(f"{', '.join(answer_only)}: answer-only re-entry. The cost columns count every position looping "
                  "(what `ledger run` computes); their prompt positions compute the same values at every loop, so "
                  "with a cache the prompt costs 1.00x and only the answer position pays for the loops.")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    try:
        from ledger.run.runner import BaseUnavailable, Runner, RunRefused
    except ImportError as exc:
        raise CommandError(f"`ledger run` needs the model extras: pip install -e '.[models]' ({exc})") from None
    from ledger.audit.preregistration import RegistrationRefused

    arms = [arm.strip() for arm in args.arms.split(",")] if args.arms else None
    try:
        runner = Runner(args.protocol, db=args.db, out=args.out, resume=args.resume, arms=arms,
                        progress=not args.no_progress)
        result = runner.run()
    except BaseUnavailable as exc:
        raise CommandError(str(exc)) from None
    except (RunRefused, RegistrationRefused) as exc:
        raise CommandError(f"refused: {exc}", EXIT_REFUSED) from None
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    _print_run_summary(result)
    return EXIT_REFUSED if result.hard_stopped else EXIT_OK


def _print_run_summary(result) -> None:
    table = Table(title=f"{result.protocol.name} ({result.protocol_sha256[:12]})")
    for column in ("arm", "status", "accuracy (final loop)", "tail (top 4 depths)", "gates"):
        table.add_column(column, overflow="fold")
    for arm in result.arms:
        accuracy = "; ".join(f"{m} {c}/{n} = {c / n:.3f}" for m, (c, n) in arm.accuracy.items() if n) or "-"
        tail = "; ".join(f"{m} {c}/{n} = {c / n:.3f}" for m, (c, n) in arm.tail.items() if n) or "-"
        gates = "; ".join(
            f"{g['gate']} {'pass' if g['passed'] else 'FAIL'} ({g['action']})" for g in arm.gates
        ) or "-"
        status = arm.status if not arm.note else f"{arm.status}: {arm.note}"
        table.add_row(arm.arm, status, accuracy, tail, gates)
    out.print(table)
    if result.claims:
        claims = Table(title="preregistered claims")
        for column in ("claim", "outcome", "integrity", "figures"):
            claims.add_column(column, overflow="fold")
        for verdict in result.claims:
            claims.add_row(verdict.claim_id, verdict.outcome, verdict.integrity, verdict.reason)
        out.print(claims)
    if result.claims_waiting_for and result.protocol.claims:
        out.print(f"claims not judged yet: arm(s) {', '.join(result.claims_waiting_for)} have not finished in this "
                  "ledger; run them (--arms), then `ledger run --resume` or `ledger verify` judges the claims")
    if result.report is not None:
        out.print(f"report: {result.report}")
    out.print(f"log: {result.out_dir / 'run.log'}")


def cmd_report(args: argparse.Namespace) -> int:
    from ledger.report.html import report_for_protocol_name

    with _store(args, create=False) as store:
        path = report_for_protocol_name(store, args.name, Path(args.out) if args.out else Path("runs") / args.name)
    out.print(f"report: {path}")
    return EXIT_OK


def cmd_pretrain_base(args: argparse.Namespace) -> int:
    try:
        from arms.bases.pretrain import pretrain_base
    except ImportError as exc:
        raise CommandError(f"`ledger pretrain-base` needs the model extras: pip install -e '.[models]' ({exc})") from None
    try:  # a bad recipe raises ProtocolError, which main() prints as located issues
        summary = pretrain_base(args.recipe, args.out, max_steps=args.max_steps, progress=not args.no_progress)
    except (ValueError, FileExistsError) as exc:
        raise CommandError(str(exc)) from None
    out.print_json(data=summary)
    return EXIT_OK


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from ledger.store import default_db_url, upgrade

    url = args.db or default_db_url()
    out.print(f"{url} is at revision {upgrade(url)}")
    return EXIT_OK


# ----------------------------------------------------------------------------- helpers


def _build_or_fail(protocol, path: Path):
    from ledger.rows.contamination import ContaminationError
    from ledger.rows.builder import build_manifests

    try:
        return build_manifests(protocol)
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
        manifest = manifests[spec.id]
        detail = spec.generator
        if spec.generator == "rule_chasing":
            detail = f"rule_chasing/{spec.surface} {spec.alphabet} depth {spec.depths[0]}-{spec.depths[1]}"
        table.add_row(spec.id, spec.role, detail, str(len(manifest)), manifest.sha256)
    return table


def _arm_design(arm) -> str:
    if arm.kind == "dense":
        objectives = {stage.objective for stage in arm.stages}
        return "dense " + ("/".join(sorted(objectives)) or "base")
    surgery = arm.surgery
    where = f"split {list(surgery.split)}" if surgery.split else f"tuple {list(surgery.tuple_)}"
    budget = arm.budget.kind
    if budget == "adapter":
        budget = f"adapter r={arm.budget.rank}"
    return f"{where}, {arm.bridge.kind} bridge, {budget}"


def _gate_rule(gate) -> str:
    if gate.kind == "installation":
        return f"active-label acc depth {gate.depths[0]}-{gate.depths[1]} >= {gate.threshold}"
    if gate.kind == "guardrail":
        return f"drop vs {gate.reference} <= {gate.max_drop}"
    if gate.kind == "retention_floor":
        return f"accuracy >= {gate.floor}"
    return f"{gate.arm} > {gate.versus} ({gate.test}, alpha {gate.alpha}, {gate.consecutive} consecutive depths)"


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledger",
        description=(
            "A preregistered experiment ledger for retrofitting depth recurrence into pretrained "
            "language models: validate protocols, build hashed row manifests, run arms under one "
            "shared reader, and verify claims from row-level evidence."
        ),
        epilog="Exit codes: 0 success; 2 bad input (located message); 3 refused by the ledger.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    check = commands.add_parser(
        "check",
        help="validate a protocol and summarise it",
        description=(
            "Validate a protocol file completely: schema, references and cross-field rules; what the "
            "registries say each kind supports (an unrunnable kind, an unsupported combination, an option "
            "nothing reads); base metadata against the base itself; claims the protocol's evidence can "
            "decide; manifests built and checked for train/eval contamination. On bad input prints "
            "file:line: field.path: reason and exits 2. `run` and `register` run the same check first."
        ),
    )
    check.add_argument("protocol", help="protocol YAML file")
    check.add_argument(
        "--dry-run", action="store_true",
        help="also build every arm from its base and take one training step per stage (needs torch; writes nothing)",
    )
    check.set_defaults(handler=cmd_check)

    schema = commands.add_parser(
        "schema", help="print the protocol JSON Schema", description="Print the JSON Schema of protocol files."
    )
    schema.add_argument("--out", help="write to this file instead of standard output")
    schema.set_defaults(handler=cmd_schema)

    manifest = commands.add_parser(
        "manifest",
        help="list a protocol's manifests with sizes and hashes; optionally write rows",
        description=(
            "Build every manifest of a protocol and list its size and SHA-256 (over the canonical "
            "rows). With --out, write each manifest's rows as canonical JSONL (DIR/ID.jsonl)."
        ),
    )
    manifest.add_argument("protocol", help="protocol YAML file")
    manifest.add_argument("--out", metavar="DIR", help="folder to write ID.jsonl files into")
    manifest.set_defaults(handler=cmd_manifest)

    def with_db(sub):
        sub.add_argument("--db", metavar="URL", help="SQLAlchemy URL of the ledger (default: $LEDGER_DB or sqlite:///runs/ledger.db)")
        return sub

    register = with_db(commands.add_parser(
        "register", help="preregister a protocol, its manifests and claims",
        description="Write the canonical protocol, its manifests (rows and hashes) and the claims it preregisters "
        "to the ledger before any result. A registered protocol whose file changed is refused (exit 3) until "
        "`ledger deviate` records the change.",
    ))
    register.add_argument("protocol", help="protocol YAML file")
    register.set_defaults(handler=cmd_register)

    deviate = with_db(commands.add_parser(
        "deviate", help="record a change to a registered protocol",
        description="Record every changed item of a registered protocol (planned vs actual, reason, timing) as "
        "deviations, then register the new version. `ledger verify` flags every claim that depends on a deviated item.",
    ))
    deviate.add_argument("protocol", help="the changed protocol YAML file")
    deviate.add_argument("--reason", required=True, help="why the protocol changed")
    deviate.add_argument("--timing", required=True, choices=["before_data", "after_data", "after_analysis"],
                         help="when the change was made relative to the data")
    deviate.set_defaults(handler=cmd_deviate)

    import_ = with_db(commands.add_parser(
        "import", help="import released row-level predictions through a mapping file",
        description="Bring another group's released rows and predictions (JSONL/CSV, gzip) into the ledger through "
        "a mapping file (see releases/). Correctness is recomputed from predictions and rows; generated text is "
        "read by the shared reader.",
    ))
    import_.add_argument("mapping", help="release mapping YAML")
    import_.add_argument("--root", help="folder holding the release files (overrides the mapping's root)")
    import_.set_defaults(handler=cmd_import)

    verify = with_db(commands.add_parser(
        "verify", help="recompute every claim from row-level evidence and check every hash",
        description="Recompute each claim from the rows, re-hash manifests, rows and checkpoint files, walk the "
        "hash chain, and print per claim its outcome (supported | refuted), integrity (verified | tampered | "
        "unverifiable), figures and reason. Verify only reads: --record records first outcomes, --import imports "
        "the releases that claim files name (an external audit) and registers their claims. A missing database "
        "is an error (exit 2), never created.",
        epilog="Exit codes: 0 all verified and every outcome equals the first recorded one (a claim evaluated for "
        "the first time must be supported); 1 an outcome differs; 2 bad input; 4 something is tampered; "
        "5 something is unverifiable.",
    ))
    verify.add_argument("paths", nargs="*", help="claim files or folders (default: claims/)")
    verify.add_argument("--since-head", metavar="ROOT:SIZE", help="also prove the log only grew since this head")
    verify.add_argument("--root", help="folder holding release files (overrides a release mapping's root)")
    verify.add_argument("--json", action="store_true", help="print a JSON report")
    verify.add_argument("--record", action="store_true",
                        help="record the first outcome of every claim that has none yet (as `ledger run` does)")
    verify.add_argument("--import", dest="import_releases", action="store_true",
                        help="first import the releases the claim files name (once) and register their claims")
    verify.set_defaults(handler=cmd_verify)

    head = with_db(commands.add_parser(
        "head", help="print the ledger's Merkle root and size (ROOT:SIZE)",
        description="Print the RFC 6962 Merkle root over every chain entry and the number of entries. Write it "
        "down; `ledger verify --since-head ROOT:SIZE` later proves the log only grew.",
    ))
    head.set_defaults(handler=cmd_head)

    query = with_db(commands.add_parser(
        "query", help="read-only SQL over the ledger (tables and auditor views)",
        description="Run one read-only SQL statement (SELECT/WITH/EXPLAIN). Writes are refused (exit 3). "
        "Views: v_accuracy_by_arm_depth, v_evidence_by_checkpoint, v_lineage, v_claim_evidence, v_claim_status, "
        "v_final_readings.",
    ))
    query.add_argument("sql", help="the SQL statement")
    query.add_argument("--format", choices=["table", "csv", "json"], default="table")
    query.set_defaults(handler=cmd_query)

    run = with_db(commands.add_parser(
        "run", help="run a protocol end to end: train, gate, evaluate, claims, report",
        description="Register the protocol (preregistration first), build its manifests, and for each arm build it "
        "from its base, run its stages (checkpoint, gates; a failed stop gate is a hard stop that marks the lineage "
        "failed), evaluate every evaluation manifest through the shared reader, then the gates between arms, the "
        "preregistered claims and the report. Bases load from local paths or the local HF cache only: a missing "
        "base stops the run at once (exit 2) with how to point it at local weights, writing nothing.",
        epilog="Exit codes: 0 complete; 2 bad input or a missing base; 3 refused (already run without --resume, a "
        "changed protocol, a failed lineage) or a hard stop happened.",
    ))
    run.add_argument("protocol", help="protocol YAML file")
    run.add_argument("--out", help="output folder (default runs/PROTOCOL-NAME): checkpoints, run.log, report")
    run.add_argument("--resume", action="store_true", help="continue a run from what the ledger already holds")
    run.add_argument("--arms", help="comma-separated arm ids to run (default: all)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars (the log still records progress)")
    run.set_defaults(handler=cmd_run)

    report = with_db(commands.add_parser(
        "report", help="write the HTML report of a protocol or imported release",
        description="Write OUT/report.html with PNG figures (per-depth accuracy with the training support shaded, "
        "per-loop heatmaps, accuracy vs latency, the claims table, the lineage tree), read from the ledger.",
    ))
    report.add_argument("name", help="protocol or release name")
    report.add_argument("--out", help="output folder (default runs/NAME)")
    report.set_defaults(handler=cmd_report)

    pretrain = commands.add_parser(
        "pretrain-base", help="pretrain a tiny base from scratch on the local synthetic corpus",
        description="Pretrain a small Qwen2 base on a synthetic corpus (single-hop table lookups, copying, "
        "arithmetic, the Tier-1 format; never iteration) as a recipe file says, deterministically from its seed. "
        "Writes OUT/ (weights, tokenizer, recipe copy, SHA256, train.log, summary.json) atomically.",
    )
    pretrain.add_argument("recipe", help="recipe YAML (e.g. bases/tiny-base.recipe.yaml)")
    pretrain.add_argument("--out", required=True, help="output folder (must not exist)")
    pretrain.add_argument("--max-steps", type=int, help="stop after this many steps (the schedule still spans the recipe)")
    pretrain.add_argument("--no-progress", action="store_true", help="no progress bar")
    pretrain.set_defaults(handler=cmd_pretrain_base)

    params = commands.add_parser(
        "params", help="trainable parameters and inference cost of every arm (no weights loaded)",
        description="Count each arm's trainable parameters (full-block: block + bridge; adapter: LoRA + bridge; "
        "dense: the whole model) and its inference cost at T loops relative to one base forward, from the bases' "
        "configs alone (built on the meta device).",
    )
    params.add_argument("protocol", help="protocol YAML file")
    params.add_argument("--loops", default="1,4,8,12", help="loop counts for the cost columns (default 1,4,8,12)")
    params.set_defaults(handler=cmd_params)

    db = commands.add_parser("db", help="database maintenance", description="Database maintenance.")
    db_commands = db.add_subparsers(dest="db_command", metavar="DB_COMMAND")
    db_commands.required = True
    upgrade = with_db(db_commands.add_parser("upgrade", help="migrate the ledger's schema to this version"))
    upgrade.set_defaults(handler=cmd_db_upgrade)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ledger.spec.loader import ProtocolError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ProtocolError as exc:
        for issue in exc.issues:
            err.print(str(issue), markup=False)
        return EXIT_BAD_INPUT
    except CommandError as exc:
        err.print(str(exc), markup=False)
        return exc.code
    except Exception as exc:  # the store's own refusals (lineage, preregistration) are exit 3
        from ledger.store import LineageRefused, PreregistrationRequired

        if isinstance(exc, (LineageRefused, PreregistrationRequired)):
            err.print(f"refused: {exc}", markup=False)
            return EXIT_REFUSED
        raise
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
