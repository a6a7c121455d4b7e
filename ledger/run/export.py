"""``ledger export CHECKPOINT --out DIR [--format hf]``: a recorded checkpoint as a loadable model folder.

Everything comes from the ledger: the checkpoint's run names its registered protocol (the
canonical JSON the ledger holds, not today's file), the protocol names the arm and its
base, and the checkpoint file is found by content (``--artifacts``). The arm is rebuilt
exactly as the run built it and the file loaded into it -- a file that does not fit the
arm is refused -- before the folder is written: this project's own (``arms.export.write_export``) or a
Hugging Face model folder (``arms.hf.export.write_hf_export``) that transformers and lm-eval load without the
ledger, read at ``num_loops`` loops unless a caller says otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ledger.checked_file import checked_copy
from ledger.protocol.protocol import Protocol
from ledger.store.artifacts import open_artifacts


class ExportRefused(Exception):
    """The checkpoint cannot be exported as asked (exit 2, nothing written)."""


FORMATS = ("ledger", "hf")


def export_checkpoint(
    store,
    prefix: str,
    out: Path,
    artifacts: Sequence[str | Path] | None = None,
    *,
    format: str = "ledger",
    num_loops: int | None = None,
) -> Path:
    """Write ``out``; ``num_loops`` (hf only) defaults to the deepest loop the arm's evaluation reads."""
    if format not in FORMATS:
        raise ExportRefused(f"--format {format!r}: choose one of {', '.join(FORMATS)}")
    if num_loops is not None and (format != "hf" or num_loops < 1):
        raise ExportRefused("--num-loops is a loop count >= 1 of an hf export")
    record = _checkpoint(store, prefix)
    if record.run_id is None or record.arm.startswith("base:"):
        raise ExportRefused(f"checkpoint {record.sha256[:12]} ({record.arm}) is a base, not a retrofitted arm")
    run = store.get("runs", run_id=record.run_id)
    registered = store.protocols(sha256s=[run["protocol_sha256"]])
    if not registered:
        raise ExportRefused(f"checkpoint {record.sha256[:12]}: its protocol {run['protocol_sha256'][:12]} is not here")
    canonical = json.loads(registered[0].canonical_json)
    protocol = Protocol.model_validate(canonical)
    arm = protocol.arm(record.arm)
    file = open_artifacts(artifacts, store.url).locate(record.path, record.sha256)
    if file is None:
        raise ExportRefused(f"checkpoint file {record.path} not found: pass --artifacts DIR")
    # the bytes loaded and written are the bytes re-hashed here: the README and provenance vouch for them
    with checked_copy(file, record.sha256, f"checkpoint {record.sha256[:12]}") as checked:
        return _write(store, record, registered[0], protocol, arm, checked, out, format, num_loops)


def _write(store, record, registered, protocol: Protocol, arm, file: Path, out: Path, format: str, num_loops) -> Path:
    """The export of ``record``, its bytes at ``file`` already checked against the recorded SHA-256."""
    from arms.export import write_export
    from arms.runtime import build_runtime
    from ledger.reader.shared import Reader
    from ledger.run.bases import load_protocol_base

    registrations = store.registrations(protocol.name)
    protocol_dir = Path(registrations[-1].file).parent if registrations else Path.cwd()
    base_model, tokenizer, _ = load_protocol_base(protocol.bases[arm.base], protocol_dir)
    protocol.located_at(protocol_dir)  # a local choice file's relative path starts at the protocol's folder
    reader = Reader(_symbols(protocol), tokenizer=tokenizer, chat_template=protocol.bases[arm.base].chat_template)
    runtime = build_runtime(arm, base_model, tokenizer, reader)
    runtime.load(file)  # refuses a file that is not this arm's
    meta = {
        "checkpoint_sha256": record.sha256,
        "arm": arm.id,
        "stage": record.stage,
        "protocol_sha256": registered.sha256,
        "protocol": json.loads(registered.canonical_json),
        "reader": {"symbols": list(reader.symbols), "chat_template": reader.chat_template},
    }
    if format == "hf":
        from arms.hf.export import write_hf_export

        loops = deepest_loop(protocol, arm) if num_loops is None else num_loops
        return write_hf_export(runtime, out, {**meta, "num_loops": loops}, loops)
    return write_export(base_model, tokenizer, file, out, meta)


def deepest_loop(protocol: Protocol, arm) -> int:
    """The deepest loop the arm's evaluation reads (1 for an arm read once), as its kind says (``loops_read``)."""
    from ledger.protocol.manifests import GENERATORS

    loops = {1}
    for manifest_id in arm.evaluation.manifests:
        manifest = protocol.manifest(manifest_id)
        loops |= arm.loops_read(manifest, GENERATORS[manifest.generator].reading)[0]
    return max(loops)


def _checkpoint(store, prefix: str):
    if len(prefix) < 8:
        raise ExportRefused(f"checkpoint {prefix!r}: give at least 8 hex digits of its SHA-256")
    matches = [row["sha256"] for row in store.rows_of("checkpoints") if row["sha256"].startswith(prefix.lower())]
    if len(matches) != 1:
        raise ExportRefused(
            f"checkpoint {prefix!r}: {'no checkpoint' if not matches else f'{len(matches)} checkpoints'} "
            "in this ledger start with it"
        )
    return store.checkpoint(matches[0])


def _symbols(protocol: Protocol) -> list[str]:
    from ledger.rows.builder import build_manifests
    from ledger.run.reading import reader_symbols

    return reader_symbols(build_manifests(protocol, check=False).values())
