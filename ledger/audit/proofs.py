"""Inclusion proofs: one chain entry (an evidence row, a claim outcome, a registration) shown to be in the
ledger's log at a (signed) head, checkable with nothing but the proof file and the head's public key.

A proof file is JSON: the entry's stored payload (its canonical JSON: kind, seq, data and the domain
rows it wrote), its leaf index, the tree size and root it is proven against, the RFC 6962 audit path,
and optionally the signed tree head of that head. ``check_proof`` recomputes the leaf hash
``SHA-256(0x00 || payload)`` and runs RFC 9162's inclusion verifier (``ledger.store.merkle``); with a
signed head it first verifies the signature and that the head names the same size and root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ledger.audit.signed_head import (
    SignedHeadError,
    TreeHead,
    VerifierKey,
    open_signed_tree_head,
    unverified_tree_head,
)
from ledger.store import Store, merkle

PROOF_FORMAT = "ledger-inclusion-proof/1"


class ProofError(ValueError):
    """A proof that cannot be made (bad input) or that does not verify; one line."""


def prove(store: Store, seq: int, *, size: int | None = None, signed_head: str | None = None) -> dict[str, Any]:
    """The inclusion proof of chain entry ``seq`` against the head of ``size`` entries (default: now).

    ``signed_head``: a signed tree head the proof is made against (its size is used, and the ledger's
    root at that size must equal the checkpoint's: else this ledger does not extend the published head)."""
    entries = store.rows_of("chain_entries")
    leaves = [merkle.leaf_hash(entry["payload"].encode()) for entry in entries]  # recomputed, not trusted
    seqs = [int(entry["seq"]) for entry in entries]
    checkpoint = None
    if signed_head is not None:
        checkpoint = unverified_tree_head(signed_head)
        size = checkpoint.size
    size = len(leaves) if size is None else size
    if not 0 < size <= len(leaves):
        raise ProofError(f"a head of {size} entries: this ledger has {len(leaves)}")
    if seq not in seqs[:size]:
        raise ProofError(f"entry {seq} is not among the first {size} entries of this ledger (1-{seqs[size - 1]})")
    index = seqs.index(seq)
    root = merkle.merkle_root(leaves[:size])
    if checkpoint is not None and checkpoint.root != root:
        raise ProofError(
            f"this ledger's first {size} entries hash to {root.hex()[:16]}..., not the signed head's "
            f"{checkpoint.root_hex[:16]}...: it does not extend that head"
        )
    proof = merkle.inclusion_proof(leaves, index, size)
    document: dict[str, Any] = {
        "format": PROOF_FORMAT,
        "seq": seq,
        "kind": entries[index]["kind"],
        "leaf_index": index,
        "tree_size": size,
        "root": root.hex(),
        "audit_path": [node.hex() for node in proof],
        "payload": entries[index]["payload"],
    }
    if signed_head is not None:
        document["signed_head"] = signed_head
    return document


@dataclass(frozen=True)
class CheckedProof:
    seq: int
    kind: str
    tree_size: int
    root: str
    signed_by: str | None
    payload: dict


def check_proof(document: Any, key: VerifierKey | None = None, signed_head: str | None = None) -> CheckedProof:
    """Verify a proof file's content with no database: raises ``ProofError`` saying what failed.

    The head is ``signed_head`` if given, else the one the proof carries; a signed head needs ``key``.
    Without any signed head the proof only shows inclusion under the root it names itself."""
    if not isinstance(document, dict) or document.get("format") != PROOF_FORMAT:
        raise ProofError(f"not a ledger inclusion proof (format {PROOF_FORMAT})")
    try:
        payload_text = str(document["payload"])
        index, size = document["leaf_index"], document["tree_size"]
        if type(index) is not int or type(size) is not int:  # not 0.5, true or 1e400: Go reads int64s
            kinds = f"{type(index).__name__} and {type(size).__name__}"  # the types, not the file's text
            raise ValueError(f"leaf_index and tree_size must be integers, not {kinds}")
        root = bytes.fromhex(str(document["root"]))
        path = [bytes.fromhex(str(node)) for node in document["audit_path"]]
        payload_bytes = payload_text.encode("utf-8")  # a lone surrogate is no UTF-8: refused here, as Go does
        payload = json.loads(payload_text)
    except (KeyError, TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise ProofError(f"malformed proof: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    except RecursionError:
        raise ProofError("malformed proof: its payload is nested too deeply") from None
    if index < 0 or size < 1 or index >= size or size >= 1 << 63:
        raise ProofError(f"malformed proof: leaf {index} of a tree of {size} entries")
    head_text = signed_head if signed_head is not None else document.get("signed_head")
    signer = None
    if head_text is not None:
        if key is None:
            raise ProofError("the proof is against a signed head: give the public key that signed it (--key)")
        try:
            checkpoint: TreeHead = open_signed_tree_head(str(head_text), key)
        except SignedHeadError as exc:
            raise ProofError(str(exc)) from None
        if (checkpoint.size, checkpoint.root) != (size, root):
            raise ProofError(
                f"the proof is for a head of {size} entries with root {root.hex()[:16]}..., the signed head is "
                f"{checkpoint.size} entries with root {checkpoint.root_hex[:16]}..."
            )
        signer = f"{key.name}+{key.id.hex()}"
    leaf = merkle.leaf_hash(payload_bytes)
    if not merkle.verify_inclusion(leaf, index, size, path, root):
        raise ProofError(f"the entry is NOT included at index {index} of the tree of {size} entries under that root")
    if not isinstance(payload, dict) or type(payload.get("seq")) is not int or payload["seq"] != document.get("seq"):
        raise ProofError("the proven payload is not the entry the proof names (seq differs)")
    return CheckedProof(int(payload["seq"]), str(payload.get("kind")), size, root.hex(), signer, payload)
