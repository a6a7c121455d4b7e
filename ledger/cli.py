"""The ``ledger`` command line.

Exit codes (shared by every command):
  0  success
  2  bad input: a protocol, claim file or argument that cannot be used (located message, no traceback)
  3  refused by the ledger (e.g. lineage or preregistration rules)
"""

from __future__ import annotations

import argparse
import json
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
    from ledger.protocol import protocol_json_schema

    text = json.dumps(protocol_json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        err.print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from ledger.claims import check_claims_against, load_claims
    from ledger.protocol_loader import ProtocolError, load_protocol

    path = Path(args.protocol)
    protocol = load_protocol(path)
    issues = []
    claim_files = []
    for index, relative in enumerate(protocol.claims):
        claim_path = (path.parent / relative).resolve()
        if not claim_path.is_file():
            issues.append(f"{path}: claims.{index}: claim file {relative!r} not found (looked at {claim_path})")
            continue
        try:
            claim_file = load_claims(claim_path)
        except ProtocolError as exc:
            issues.extend(str(issue) for issue in exc.issues)
            continue
        issues.extend(str(issue) for issue in check_claims_against(claim_file, protocol, str(claim_path)))
        claim_files.append((relative, claim_file))
    if issues:
        raise CommandError("\n".join(issues))
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
    out.print("[green]ok[/green]: protocol is valid, manifests are built and uncontaminated")
    return EXIT_OK


def cmd_manifest(args: argparse.Namespace) -> int:
    from ledger.protocol_loader import load_protocol

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


# ----------------------------------------------------------------------------- helpers


def _build_or_fail(protocol, path: Path):
    from ledger.contamination import ContaminationError
    from ledger.manifest_builder import build_manifests

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
            "Validate a protocol file (schema, references, cross-field rules), its claim files and "
            "its manifests (built and checked for train/eval contamination). On bad input prints "
            "file:line: field.path: reason and exits 2."
        ),
    )
    check.add_argument("protocol", help="protocol YAML file")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    from ledger.protocol_loader import ProtocolError

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
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
