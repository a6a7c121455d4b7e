"""`ledger fingerprint` and `ledger compare`: what a reproduction must match, and whether it did.

Both only read. A side of `compare` is a ledger (a URL, or a SQLite file's path) or a record folder
holding `fingerprint.json` (or that file itself). Exit codes of `compare`: 0 identical evidence,
1 the evidence differs, 2 bad input (one line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from ledger.cli.common import CommandError, _store, err, out


def add_parsers(commands, with_db) -> None:
    fingerprint = with_db(
        commands.add_parser(
            "fingerprint",
            help="what a reproduction must match: checkpoints, claims and environments, as JSON",
            description=(
                "Print the ledger's fingerprint: per protocol and arm, every recorded checkpoint in recording "
                "order (stage, SHA-256, status, each step's training loss); per claim, its first recorded "
                "outcome and figures; every distinct environment its runs recorded. A committed record folder "
                "keeps it as fingerprint.json, which `ledger compare` reads. Writes nothing but --out."
            ),
        )
    )
    fingerprint.add_argument("--protocol", action="append", metavar="NAME", help="only this protocol (repeatable)")
    fingerprint.add_argument("--out", metavar="FILE", help="write to FILE (a folder: FILE/fingerprint.json)")
    fingerprint.set_defaults(handler=cmd_fingerprint)

    compare = commands.add_parser(
        "compare",
        help="did a reproduction give the same evidence? where did two runs part?",
        description=(
            "Compare two ledgers, or a ledger and a record folder (one holding fingerprint.json): per protocol "
            "and arm, whether the checkpoints are identical and, if not, the first stage and step whose training "
            "loss differs; per claim, both outcomes and figures side by side; then how the two sides' recorded "
            "environments differ (to explain, never to decide). Only protocols both sides hold are compared "
            "unless --protocol names one. Exit 0 identical evidence, 1 it differs, 2 bad input."
        ),
        epilog="A side is a SQLAlchemy URL, a SQLite file's path, a record folder or a fingerprint.json file.",
    )
    compare.add_argument("a", metavar="A", help="a ledger (URL or SQLite path) or a record folder")
    compare.add_argument("b", metavar="B", help="a ledger (URL or SQLite path) or a record folder")
    compare.add_argument("--protocol", action="append", metavar="NAME", help="only this protocol (repeatable)")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.set_defaults(handler=cmd_compare)


def _ledger_fingerprint(url: str | None, protocols: list[str] | None) -> dict[str, Any]:
    from ledger.audit.fingerprint import fingerprint

    with _store(argparse.Namespace(db=url), create=False, read_only=True) as store:
        return fingerprint(store, protocols)


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from ledger.audit.fingerprint import write_fingerprint

    document = _ledger_fingerprint(args.db, args.protocol)
    if not args.out:
        sys.stdout.write(json.dumps(document, indent=1, sort_keys=True) + "\n")
        return 0
    try:
        written = write_fingerprint(document, Path(args.out))
    except OSError as exc:
        raise CommandError(f"{args.out}: cannot write the fingerprint ({exc.strerror or exc})") from None
    out.print(f"fingerprint of {len(document['protocols'])} protocols written to {written}", markup=False)
    return 0


def _side(source: str, protocols: list[str] | None) -> dict[str, Any]:
    """The fingerprint of one side of `compare`."""
    from ledger.audit.fingerprint import FingerprintError, load_fingerprint

    path = Path(source)
    if "://" not in source and (path.is_dir() or path.suffix == ".json"):
        try:
            document = load_fingerprint(path)
        except FingerprintError as exc:
            raise CommandError(str(exc)) from None
        if protocols:
            document = {**document, "protocols": {k: v for k, v in document["protocols"].items() if k in protocols}}
        return document
    if "://" not in source and not path.is_file():
        raise CommandError(f"{source}: no such ledger file or record folder")
    return _ledger_fingerprint(source, protocols)


def cmd_compare(args: argparse.Namespace) -> int:
    from ledger.audit.compare import compare

    a, b = _side(args.a, args.protocol), _side(args.b, args.protocol)
    if args.protocol:
        for name in args.protocol:
            if name not in a["protocols"] and name not in b["protocols"]:
                raise CommandError(f"--protocol {name}: neither side holds a protocol of that name")
    else:  # what both hold: a ledger may hold more protocols than a record folder keeps
        shared = set(a["protocols"]) & set(b["protocols"])
        if not shared:
            raise CommandError(
                f"{args.a} and {args.b} hold no protocol of the same name "
                f"(A: {', '.join(sorted(a['protocols'])) or 'none'}; B: {', '.join(sorted(b['protocols'])) or 'none'})"
            )
        a = {**a, "protocols": {k: v for k, v in a["protocols"].items() if k in shared}}
        b = {**b, "protocols": {k: v for k, v in b["protocols"].items() if k in shared}}
    result = compare(a, b, labels=(args.a, args.b))
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return result.exit_code
    out.print(f"A  {args.a}\nB  {args.b}", markup=False)
    for line in result.only:
        out.print(f"protocol {line}", markup=False)
    arms = Table(title="checkpoints, per protocol and arm")
    for column in ("protocol", "arm", "", "detail"):
        arms.add_column(column, overflow="fold")
    for arm in result.arms:
        mark = Text("identical", style="green") if arm.identical else Text("differ", style="red")
        arms.add_row(arm.protocol, arm.arm, mark, arm.detail)
    out.print(arms)
    claims = Table(title="claims: first recorded outcome and figures")
    for column in ("protocol", "claim", "A", "B", "figures that differ"):
        claims.add_column(column, overflow="fold")
    for claim in result.claims:
        outcome_a = (claim.a or {}).get("outcome", "(none)")
        outcome_b = (claim.b or {}).get("outcome", "(none)")
        figures = ", ".join(
            f"{key} {((claim.a or {}).get('figures') or {}).get(key)!r} / {((claim.b or {}).get('figures') or {}).get(key)!r}"
            for key in claim.differing_figures()
        )
        colour = "green" if claim.identical else "red"
        claims.add_row(claim.protocol, claim.claim_id, Text(str(outcome_a), style=colour), outcome_b, figures or "—")
    if result.claims:
        out.print(claims)
    if result.environment:
        err.print(f"the recorded environments differ ({len(result.environment)}):", markup=False)
        for line in result.environment:
            err.print(f"  environment: {line}", markup=False)
    identical_arms = sum(arm.identical for arm in result.arms)
    identical_claims = sum(claim.identical for claim in result.claims)
    summary = (
        f"{identical_arms} of {len(result.arms)} arms and {identical_claims} of {len(result.claims)} claims identical"
    )
    if result.identical:
        out.print(Text.assemble(("identical evidence", "green"), f": {summary}"))
    else:
        out.print(Text.assemble(("the evidence differs", "red"), f": {summary}"))
    return result.exit_code
