"""Commands for evidence a stranger can check: keys, signed heads, inclusion proofs (``ledger/audit/``'s
``signed_head`` and ``proofs``). ``add_parsers`` adds them to the ``ledger`` parser."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ledger.cli.common import EXIT_OK, CommandError, _store, out
from ledger.inputs import MAX_DOCUMENT_BYTES, MAX_NOTE_BYTES, InputFileError, parse_json

SIGNING_KEY_ENV = "LEDGER_SIGNING_KEY"


def _read(path: str, what: str, limit: int = MAX_NOTE_BYTES) -> str:
    """A key, signed head or proof file: a regular file within its budget, or one line saying why not."""
    from ledger.inputs import InputFileError, read_text

    try:
        return read_text(path, what, limit)
    except InputFileError as exc:
        raise CommandError(str(exc)) from None


def load_signing_key(path: str):
    from ledger.audit.signed_head import SignedHeadError, parse_signing_key

    try:
        return parse_signing_key(_read(path, "signing key"))
    except SignedHeadError as exc:
        raise CommandError(f"{path}: {exc}") from None


def load_verifier_key(path: str):
    from ledger.audit.signed_head import SignedHeadError, parse_verifier_key

    try:
        return parse_verifier_key(_read(path, "public key"))
    except SignedHeadError as exc:
        raise CommandError(f"{path}: {exc}") from None


def signed_head_of(store, key, origin: str | None = None) -> str:
    """The store's current head as a checkpoint signed by ``key`` (origin: the key's name by default)."""
    from ledger.audit.signed_head import TreeHead, sign_tree_head

    root, size = store.head()
    return sign_tree_head(TreeHead(origin or key.name, size, bytes.fromhex(root)), key)


def _write_new(path: Path, text: str, mode: int) -> None:
    """Write a file that must not exist yet (a key is never overwritten)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise CommandError(f"{path} exists: a key is never overwritten (choose another name or folder)") from None
    except OSError as exc:
        raise CommandError(f"{path}: {exc}") from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def cmd_key_generate(args: argparse.Namespace) -> int:
    from ledger.audit.signed_head import SignedHeadError, generate_key

    try:
        key = generate_key(args.name)
    except SignedHeadError as exc:
        raise CommandError(str(exc)) from None
    folder = Path(args.out)
    if not folder.is_dir():
        raise CommandError(f"{folder}: no such folder")
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", key.name)
    private, public = folder / f"{stem}.key", folder / f"{stem}.pub"
    texts = key.text() + "\n", key.verifier().text() + "\n"  # both made before either file is written
    for path in (private, public):
        if path.exists():
            raise CommandError(f"{path} exists: a key is never overwritten (choose another name or folder)")
    _write_new(private, texts[0], 0o600)
    _write_new(public, texts[1], 0o644)
    out.print(f"signing key {private} (keep it private)\npublic key  {public} (publish it)", markup=False)
    return EXIT_OK


def cmd_head(args: argparse.Namespace) -> int:
    key = load_signing_key(args.sign) if args.sign else None  # bad input before the database is opened
    with _store(args, read_only=True) as store:
        if key is None:
            root, size = store.head()
            out.print(f"{root}:{size}", markup=False)
            return EXIT_OK
        note = signed_head_of(store, key, args.origin)
    if args.out:
        _write_new(Path(args.out), note, 0o644)
    sys.stdout.write(note)
    return EXIT_OK


def cmd_prove(args: argparse.Namespace) -> int:
    from ledger.audit.proofs import ProofError, prove

    signed = _read(args.head, "signed head") if args.head else None
    with _store(args, read_only=True) as store:
        try:
            document = prove(store, args.seq, size=args.size, signed_head=signed)
        except ProofError as exc:
            raise CommandError(str(exc)) from None
        except ValueError as exc:  # a malformed signed head
            raise CommandError(f"{args.head}: {exc}") from None
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        _write_new(Path(args.out), text, 0o644)
        out.print(f"proof of entry {args.seq} ({document['kind']}) at size {document['tree_size']}: {args.out}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_verify_proof(args: argparse.Namespace) -> int:
    from ledger.audit.proofs import ProofError, check_proof

    try:
        document = parse_json(_read(args.proof, "proof", MAX_DOCUMENT_BYTES), args.proof)
    except InputFileError as exc:
        raise CommandError(str(exc)) from None
    key = load_verifier_key(args.key) if args.key else None
    signed = _read(args.head, "signed head") if args.head else None
    if key is None and (signed is not None or (isinstance(document, dict) and "signed_head" in document)):
        raise CommandError(f"{args.proof}: the proof is against a signed head: give its signer's public key (--key)")
    try:
        checked = check_proof(document, key, signed)
    except ProofError as exc:
        raise CommandError(f"{args.proof}: {exc}", 4) from None
    by = f"signed by {checked.signed_by}" if checked.signed_by else "NOT signed: the root is only the proof's own claim"
    out.print(
        f"included: entry {checked.seq} ({checked.kind}) is in the log of {checked.tree_size} entries with root "
        f"{checked.root} ({by})",
        markup=False,
    )
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    import json

    from rich.table import Table

    from ledger.audit.history import protocol_history

    with _store(args, read_only=True) as store:
        try:
            history = protocol_history(store, args.name)
        except LookupError as exc:
            raise CommandError(str(exc).strip("'\"")) from None
    if args.json:
        sys.stdout.write(json.dumps(history.to_dict(), indent=2) + "\n")
        return EXIT_OK
    n = len(history.versions)
    out.print(f"{history.name}: {n} registered version{'s' * (n != 1)}", markup=False)
    for version in history.versions:
        out.print(
            f"\nversion {version.number} of {n} ({version.protocol.version}, {version.protocol.sha256[:12]}, "
            f"registered at entry {version.registered_seq}): {version.supported()} of {len(version.claims)} "
            "claims supported",
            markup=False,
        )
        for tuning in version.tuning:
            out.print(f"  tuning before it: {tuning.name} v{tuning.version} ({tuning.sha256[:12]})", markup=False)
        for deviation in version.deviations:
            out.print(f"  changed ({deviation.timing}): {deviation.item}: {deviation.reason}", markup=False)
        for manifest, readings, rows in version.readings:
            out.print(f"  read {manifest}: {rows} rows, {readings} readings", markup=False)
    claims = history.claims()
    if claims:
        table = Table(title="claims by version")
        table.add_column("claim")
        for version in history.versions:
            table.add_column(f"v{version.number}")
        for claim in claims:
            table.add_row(claim, *(version.outcome_of(claim) for version in history.versions))
        out.print(table)
    return EXIT_OK


def add_parsers(commands, with_db) -> None:
    history = with_db(
        commands.add_parser(
            "history",
            help="every registered version of a protocol side by side",
            description="Every registered version of protocol NAME: what changed on the way to it (its recorded "
            "deviations), the rows its runs read, each preregistered claim's outcome on its evidence, and the "
            "tuning (exploratory protocols) registered before it. Read-only.",
        )
    )
    history.add_argument("name", help="the protocol's name")
    history.add_argument("--json", action="store_true", help="print it as JSON")
    history.set_defaults(handler=cmd_history)

    key = commands.add_parser("key", help="signing keys for published heads")
    key_commands = key.add_subparsers(dest="key_command", metavar="SUBCOMMAND", required=True)
    generate = key_commands.add_parser(
        "generate",
        help="make an Ed25519 key pair (NAME.key, NAME.pub)",
        description="Write NAME.key (private, mode 600, never overwritten) and NAME.pub (publish it with your "
        "claims) in the C2SP signed-note key formats. NAME is the key's name, e.g. example.org/lab-ledger.",
    )
    generate.add_argument("name", help="the key's name (no spaces or '+'), e.g. example.org/lab-ledger")
    generate.add_argument("--out", default=".", help="folder for the two files (default: here)")
    generate.set_defaults(handler=cmd_key_generate)

    head = with_db(
        commands.add_parser(
            "head",
            help="print the ledger's Merkle root and size (ROOT:SIZE), or a signed tree head",
            description="Print the RFC 6962 Merkle root over every chain entry and the number of entries. Write it "
            "down; `ledger verify --since-head ROOT:SIZE` later proves the log only grew. With --sign KEY: a C2SP "
            "tlog-checkpoint signed as a C2SP signed note (Ed25519): publish it with your claims; `ledger verify "
            "--trusted-head FILE --key PUB` proves a later ledger extends it.",
        )
    )
    head.add_argument("--sign", metavar="KEY", help="signing key file (from `ledger key generate`)")
    head.add_argument("--origin", help="the checkpoint's origin line (default: the key's name)")
    head.add_argument("--out", help="also write the signed tree head to this new file")
    head.set_defaults(handler=cmd_head)

    prove = with_db(
        commands.add_parser(
            "prove",
            help="the inclusion proof of one chain entry against a head",
            description="Write the RFC 6962 inclusion proof of chain entry SEQ (an evidence row, a claim outcome, a "
            "registration: its seq in chain_entries, or the entry_seq of a domain row such as an evidence row) as JSON, against the current head, "
            "--size N, or a signed head (--head FILE). `ledger verify-proof` checks it without the database.",
        )
    )
    prove.add_argument("seq", type=int, help="the chain entry's seq")
    prove.add_argument("--size", type=int, help="prove against the head of this many entries (default: now)")
    prove.add_argument("--head", help="a signed head (from `ledger head --sign`) to prove against")
    prove.add_argument("--out", help="write the proof to this new file (default: print it)")
    prove.set_defaults(handler=cmd_prove)

    verify_proof = commands.add_parser(
        "verify-proof",
        help="check an inclusion proof with no database",
        description="Check a proof from `ledger prove` by the RFC 9162 algorithm, using nothing but the proof, the "
        "entry it carries and the head (its own, or --head FILE), whose signature is checked with --key.",
        epilog="Exit codes: 0 included; 2 bad input; 4 the proof or the head's signature does not verify.",
    )
    verify_proof.add_argument("proof", help="proof file (JSON)")
    verify_proof.add_argument("--key", help="public key file of the head's signer")
    verify_proof.add_argument("--head", help="signed head to check against (default: the one in the proof)")
    verify_proof.set_defaults(handler=cmd_verify_proof)
