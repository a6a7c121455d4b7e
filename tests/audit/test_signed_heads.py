"""Signed heads (C2SP tlog-checkpoint as a C2SP signed note, Ed25519) and inclusion proofs (RFC 6962 paths,
checked by RFC 9162's verifier), without the CLI: ledger/audit/signed_head.py, ledger/audit/proofs.py."""

from __future__ import annotations

import base64
import json

import pytest

from ledger.audit.proofs import ProofError, check_proof, prove
from ledger.audit.signed_head import (
    SignedHeadError,
    TreeHead,
    generate_key,
    open_note,
    open_signed_tree_head,
    parse_signing_key,
    parse_tree_head,
    parse_verifier_key,
    sign_note,
    sign_tree_head,
)
from ledger.store import merkle, open_store

# The reference example of golang.org/x/mod/sumdb/note (the format's reference implementation): Ed25519 is
# deterministic, so the same key and text must give the published signature byte for byte.
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_SIGNATURE = "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="


def test_keys_and_signatures_match_the_reference_implementation():
    signer, verifier = parse_signing_key(GO_SKEY), parse_verifier_key(GO_VKEY)
    assert signer.text() == GO_SKEY and verifier.text() == GO_VKEY and signer.verifier() == verifier
    note = sign_note(GO_TEXT, signer)
    assert note == f"{GO_TEXT}\n\u2014 PeterNeumann {GO_SIGNATURE}\n"
    assert open_note(note, verifier) == GO_TEXT


@pytest.mark.parametrize(
    "text",
    [
        GO_VKEY.replace("c74f20a3", "c74f20a4"),  # key ID that does not match
        GO_VKEY.replace("+ARpc", "+AhRpc"),  # not 33 bytes
        "PeterNeumann+c74f20a3",  # no key
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # a space in the name
        GO_SKEY,  # a private key where a public one belongs
    ],
)
def test_malformed_public_keys_are_refused(text):
    with pytest.raises(SignedHeadError):
        parse_verifier_key(text)


def _flip_bit(data: bytes, bit: int) -> bytes:
    changed = bytearray(data)
    changed[bit // 8] ^= 1 << (bit % 8)
    return bytes(changed)


def test_a_signed_head_verifies_and_one_bit_of_root_size_or_signature_does_not():
    key = generate_key("example.org/lab-ledger")
    checkpoint = TreeHead("example.org/lab-ledger", 1234, bytes(range(32)))
    note = sign_tree_head(checkpoint, key)
    assert open_signed_tree_head(note, key.verifier()) == checkpoint
    assert parse_tree_head(checkpoint.text()) == checkpoint
    text, signature_line = note.split("\n\n")
    origin, size, root = text.split("\n")[:3]
    for bit in range(256):  # every bit of the root
        forged_root = base64.b64encode(_flip_bit(base64.b64decode(root), bit)).decode()
        with pytest.raises(SignedHeadError, match="does not verify"):
            open_signed_tree_head(f"{origin}\n{size}\n{forged_root}\n\n{signature_line}", key.verifier())
    for forged_size in ("1235", "1233", "12340", str(1234 ^ 1)):
        with pytest.raises(SignedHeadError, match="does not verify"):
            open_signed_tree_head(f"{origin}\n{forged_size}\n{root}\n\n{signature_line}", key.verifier())
    prefix, encoded = signature_line.rstrip("\n").rsplit(" ", 1)
    raw = base64.b64decode(encoded)
    for bit in range(32, len(raw) * 8):  # every bit of the signature (the first 32 are the key ID)
        forged = f"{prefix} {base64.b64encode(_flip_bit(raw, bit)).decode()}\n"
        with pytest.raises(SignedHeadError, match="does not verify"):
            open_signed_tree_head(f"{text}\n\n{forged}", key.verifier())
    # another key's signature is ignored, so a head that only it signed is refused
    other = generate_key("example.org/lab-ledger")
    with pytest.raises(SignedHeadError, match="no signature by"):
        open_signed_tree_head(note, other.verifier())


def test_inclusion_proofs_of_every_entry_at_several_tree_sizes(tmp_path):
    key = generate_key("example.org/proofs")
    with open_store(f"sqlite:///{tmp_path / 'ledger.db'}") as store:
        for index in range(300):
            store.append("note", {"index": index, "text": "x" * (index % 7)})
        entries = store.rows_of("chain_entries")
        leaves = [merkle.leaf_hash(entry["payload"].encode()) for entry in entries]
        assert [leaf.hex() for leaf in leaves] == [entry["leaf_hash"] for entry in entries]
        for size in (1, 2, 3, 5, 8, 64, 100, 255, 256, 257, 300):
            root = merkle.merkle_root(leaves[:size])
            for index in range(size):
                path = merkle.inclusion_proof(leaves, index, size)
                assert merkle.verify_inclusion(leaves[index], index, size, path, root)
                if size > 1:
                    assert not merkle.verify_inclusion(leaves[index - 1], index, size, path, root)
        # whole proof files, against signed heads, at three sizes
        for size in (7, 128, 300):
            root = merkle.merkle_root(leaves[:size])
            signed = sign_tree_head(TreeHead(key.name, size, root), key)
            for seq in range(1, size + 1, 3):
                document = json.loads(json.dumps(prove(store, seq, signed_head=signed)))
                checked = check_proof(document, key.verifier())
                assert (checked.seq, checked.tree_size, checked.signed_by) == (
                    seq,
                    size,
                    f"{key.name}+{key.verifier().id.hex()}",
                )
        document = prove(store, 10, size=300)
    unsigned = check_proof(document)  # no head: inclusion under the root the proof names, and it says so
    assert unsigned.signed_by is None and unsigned.payload["data"]["index"] == 9
    forged = dict(document, payload=document["payload"].replace('"index":9', '"index":10'))
    with pytest.raises(ProofError, match="NOT included"):
        check_proof(forged)
    moved = dict(document, leaf_index=document["leaf_index"] + 1)
    with pytest.raises(ProofError, match="NOT included"):
        check_proof(moved)
    bent = dict(document, audit_path=[("0" * 64)] + document["audit_path"][1:])
    with pytest.raises(ProofError, match="NOT included"):
        check_proof(bent)
    with pytest.raises(ProofError, match="--key"):
        check_proof(dict(document, signed_head=sign_tree_head(TreeHead("o", 300, b"\0" * 32), key)))
    other_head = sign_tree_head(TreeHead("o", 300, b"\0" * 32), key)
    with pytest.raises(ProofError, match="signed head is"):
        check_proof(document, key.verifier(), other_head)
    # what JSON can carry that no int64 or UTF-8 reader takes: malformed, never an internal error
    for field, value in [("leaf_index", float("inf")), ("leaf_index", 9.0), ("tree_size", True), ("leaf_index", "9")]:
        with pytest.raises(ProofError, match="malformed proof: leaf_index and tree_size must be integers"):
            check_proof(dict(document, **{field: value}))
    with pytest.raises(ProofError, match="malformed proof: 'utf-8' codec can't encode"):
        check_proof(dict(document, payload=document["payload"].replace("x", "\ud800", 1)))
    with pytest.raises(ProofError, match="malformed signed note: not UTF-8 text"):
        check_proof(document, key.verifier(), "\ud800" + other_head)


def test_consistency_edge_cases_follow_rfc_9162():
    leaves = [merkle.leaf_hash(bytes([i])) for i in range(9)]
    root = merkle.merkle_root(leaves)
    # RFC 9162 proves consistency for 0 < m < n only, and Go's tlog.CheckTree refuses a tree of 0: so do we
    assert not merkle.verify_consistency(merkle.EMPTY_ROOT, 0, root, 9, [])
    assert not merkle.verify_consistency(merkle.EMPTY_ROOT, 0, root, 9, [root])
    assert merkle.consistency_proof(leaves, 0) == [] and merkle.consistency_proof(leaves, 9) == []
    assert merkle.verify_consistency(root, 9, root, 9, []) and not merkle.verify_consistency(root, 9, root, 9, [root])
    assert not merkle.verify_consistency(root, 9, root, 8, [])  # a smaller new tree
    for old in range(1, 9):
        proof = merkle.consistency_proof(leaves, old)
        assert merkle.verify_consistency(merkle.merkle_root(leaves[:old]), old, root, 9, proof)
        assert not merkle.verify_consistency(merkle.merkle_root(leaves[:old]), old, root, 9, [])
