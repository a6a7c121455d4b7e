"""The ledger commands: register, deviate, import, verify, head, query, db upgrade."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path

from rich.table import Table
from rich.text import Text

from ledger.cli.common import EXIT_OK, EXIT_REFUSED, CommandError, _store, err, out


def cmd_register(args: argparse.Namespace) -> int:
    from ledger.audit.preregistration import register
    from ledger.audit.refusals import RegistrationRefused
    from ledger.protocol.check import check_protocol_file
    from ledger.rows.builder import build_manifests

    checked = check_protocol_file(args.protocol)  # refused before the database is opened (or created)
    manifests = _built(build_manifests, checked.protocol)
    _preflight(checked, manifests)  # power and the reader's calibration, also before the database
    with contextlib.ExitStack() as stack:
        # --also-db and the project's tuning ledgers (ledger-project.yaml): unreadable ones before the ledger too
        also = _other_ledgers(stack, _ledgers_to_consult(args.protocol, args.also_db))
        store = stack.enter_context(_store(args))
        try:
            registration = register(store, args.protocol, checked, manifests, also)
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


def _built(build_manifests, protocol):
    """The protocol's manifests; a local file that is missing, changed or malformed is one line (exit 2)."""
    try:
        return build_manifests(protocol)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _ledgers_to_consult(protocol: str, also_db: list[str] | None) -> list[str]:
    from ledger.protocol.project import ProjectFileError, ledgers_to_consult

    try:
        return ledgers_to_consult(protocol, also_db)
    except ProjectFileError as exc:
        raise CommandError(str(exc)) from None


def _other_ledgers(stack: contextlib.ExitStack, urls: list[str] | None) -> tuple:
    from ledger.store import StoreError, open_other_ledgers

    try:
        return stack.enter_context(open_other_ledgers(urls or []))
    except StoreError as exc:
        raise CommandError(str(exc)) from None


def _preflight(checked, manifests) -> None:
    from ledger.run.preflight import CalibrationRefused, preflight

    try:
        preflight(checked, manifests)
    except CalibrationRefused as exc:
        raise CommandError(str(exc)) from None


def cmd_deviate(args: argparse.Namespace) -> int:
    from ledger.audit.preregistration import deviate
    from ledger.audit.refusals import RegistrationRefused
    from ledger.protocol.check import check_protocol_file
    from ledger.rows.builder import build_manifests

    checked = check_protocol_file(args.protocol)
    _preflight(checked, _built(build_manifests, checked.protocol))  # the new version's claims and rows
    with _store(args) as store:
        try:
            old, new, changes = deviate(store, args.protocol, reason=args.reason, timing=args.timing, checked=checked)
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
        out.print(
            f"{'already imported' if summary.already else 'imported'}: {summary.release} {summary.protocol_sha256}"
        )
        for name, (rows, sha) in summary.manifests.items():
            out.print(f"  manifest {name}: {rows} rows {sha}")
        for what, count in summary.evidence.items():
            out.print(f"  evidence {what}: {count}")
        for name in summary.counts:
            out.print(f"  per-depth counts {name}")
    return EXIT_OK


def _trusted_head(args: argparse.Namespace) -> tuple[str, int]:
    """(root hex, size) of a signed head whose signature verifies with the given public key."""
    from ledger.audit.signed_head import SignedHeadError, open_signed_tree_head
    from ledger.cli.transparency_commands import _read, load_verifier_key

    if not (args.trusted_head and args.key):
        raise CommandError("--trusted-head FILE needs --key PUB (the public key that signed it), and --key a head")
    key = load_verifier_key(args.key)
    note = _read(args.trusted_head, "signed head")
    try:
        checkpoint = open_signed_tree_head(note, key)
    except SignedHeadError as exc:
        raise CommandError(f"{args.trusted_head}: {exc}", 4) from None
    return checkpoint.root_hex, checkpoint.size


def cmd_verify(args: argparse.Namespace) -> int:
    from ledger.audit.recording import import_external, record_outcomes
    from ledger.audit.release import ReleaseError
    from ledger.audit.verdicts import Tally
    from ledger.audit.verify import claim_files, verify
    from ledger.run.environment import current_environment

    since = None
    if args.since_head:
        root, _, size = args.since_head.rpartition(":")
        if not re.fullmatch(r"[0-9a-fA-F]{64}", root) or not size.isdigit():
            raise CommandError(f"--since-head wants ROOT:SIZE as printed by `ledger head`, got {args.since_head!r}")
        since = (root, int(size))
    if args.trusted_head or args.key:
        if args.since_head:
            raise CommandError("give either --since-head or --trusted-head, not both")
        since = _trusted_head(args)
    paths = args.paths or ["claims"]
    try:  # a claim file that does not load is bad input (2), found before the ledger is opened
        _, unreadable = claim_files(paths)
    except FileNotFoundError as exc:
        raise CommandError(str(exc)) from None
    if unreadable:
        more = f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""
        raise CommandError(f"{unreadable[0]}{more}")
    # Only an explicit --import may create a ledger (as `ledger import` does); verify alone reads.
    with _store(args, create=args.import_releases, read_only=not (args.record or args.import_releases)) as store:
        try:
            imported = import_external(store, paths, args.root) if args.import_releases else None
            releases = imported.loaded if imported is not None else None  # read once, not again by verify
            artifacts = list(args.artifacts or [])  # folders, or KIND://... (ledger.store.artifacts)
            report = verify(
                store,
                paths,
                root=args.root,
                since_head=since,
                releases=releases,
                artifacts=artifacts,
                every_file=args.all_files,
                environment=current_environment(Path.cwd()),
            )
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
    if report.environment:  # a warning, never a silent pass: the claims are judged the same either way
        err.print(f"warning: the runs recorded another environment than this one ({len(report.environment)}):")
        for line in report.environment:
            err.print(f"  environment: {line}", markup=False)
    for problem in report.chain_problems:
        err.print(f"chain: {problem}", markup=False)
    for error in report.errors:
        err.print(error, markup=False)
    table = Table(title=f"claims: {Tally.of(report.verdicts).line()}")
    for column in ("claim", "outcome", "integrity", "first", "paper", "figures / reason"):
        table.add_column(column, overflow="fold")
    for verdict in report.verdicts:
        colour = "green" if verdict.ok else "red"
        detail = verdict.reason
        if verdict.problems:
            detail += "\n" + "\n".join(f"! {problem}" for problem in verdict.problems)
        if verdict.flags:
            detail += "\n" + "\n".join(f"~ {flag}" for flag in verdict.flags)
        if verdict.versions:
            detail += f"\n= {verdict.versions}"
        table.add_row(
            verdict.claim_id,
            Text(verdict.outcome, style=colour),
            verdict.integrity,
            verdict.first_outcome or ("(missing)" if verdict.first_outcome_missing else "(new)"),
            _paper_cell(verdict),
            detail,
        )
    out.print(table)
    if report.since_head:
        out.print(f"since head: {report.since_head}", markup=False)
    out.print(f"history: {report.history}", markup=False)
    out.print(f"ledger head {report.head[0]}:{report.head[1]}")
    out.print(
        Text("verified", style="green") if report.exit_code == 0 else Text(f"exit {report.exit_code}", style="red")
    )
    return report.exit_code


def _paper_cell(verdict) -> str:
    """The paper's finding beside ours: "replicates (supported; relay 86.0%)", or "-" without one."""
    if verdict.paper is None:
        return "-"
    state = {True: "replicates", False: "departs", None: "not judged"}[verdict.replicates]
    return f"{state} (paper: {verdict.paper['outcome']}; {verdict.paper['figure']})"


def cmd_query(args: argparse.Namespace) -> int:
    from ledger.store import QueryTimeout, ReadOnlyViolation

    with _store(args, read_only=True) as store:
        try:
            result = store.query(args.sql, timeout_s=args.timeout)
        except ReadOnlyViolation as exc:
            raise CommandError(f"refused: {exc}", EXIT_REFUSED) from None
        except QueryTimeout as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:  # SQL errors are the user's input: the driver's first line, not SQLAlchemy's wrapper
            reason = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CommandError(f"query failed: {reason}") from None
    frame = result.to_dataframe()
    if args.format == "csv":
        sys.stdout.write(frame.to_csv(index=False))
    elif args.format == "json":
        sys.stdout.write(frame.to_json(orient="records", indent=2) + "\n")
    else:
        table = Table()
        for column in frame.columns:
            table.add_column(Text(str(column)))
        for row in frame.itertuples(index=False):  # cells as plain text: data is never rich markup
            table.add_row(*(Text("" if value is None else str(value)) for value in row))
        out.print(table)
    return EXIT_OK


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from ledger.store import default_db_url, display_url, upgrade

    url = args.db or default_db_url()
    revision = upgrade(url)  # DatabaseUnavailable: one line, exit 2 (cli/main.py)
    out.print(f"{display_url(url)} is at revision {revision}", markup=False)
    return EXIT_OK
