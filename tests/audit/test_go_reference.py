"""The reference implementations read what the ledger writes, and refuse what it refuses: Go's
golang.org/x/mod/sumdb/note opens our signed heads, sumdb/tlog checks our inclusion and consistency proofs
(tests/audit/go/refcheck.go, built here against Debian's golang-go and golang-golang-x-mod-dev, which `bash tests/run.sh`
installs). Every malformed note below is refused by both, or accepted by both."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ledger.audit.proofs import ProofError, check_proof, prove
from ledger.audit.signed_head import SignedHeadError, TreeHead, generate_key, open_note, sign_note, sign_tree_head
from ledger.store import merkle, open_store

SOURCE = Path(__file__).parent / "go" / "refcheck.go"
GOPATH = "/usr/share/gocode"  # where Debian's golang-golang-x-mod-dev puts golang.org/x/mod


@pytest.fixture(scope="module")
def refcheck(tmp_path_factory) -> Path:
    go = shutil.which("go")
    if go is None or not (Path(GOPATH) / "src/golang.org/x/mod/sumdb/note").is_dir():
        pytest.fail(
            "the Go cross-check needs Go and golang.org/x/mod: `bash tests/run.sh` installs them (Debian's "
            "golang-go and golang-golang-x-mod-dev)",
            pytrace=False,
        )
    folder = tmp_path_factory.mktemp("refcheck")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOCACHE=str(folder / "cache"), GOFLAGS="")
    binary = folder / "refcheck"
    subprocess.run([go, "build", "-o", str(binary), str(SOURCE)], check=True, env=env, cwd=folder)
    return binary


def _go(refcheck: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([str(refcheck), *args], capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr  # 2 would be the harness's own usage error
    return done


def _ours_opens(note: str, key) -> bool:
    try:
        open_note(note, key)
    except SignedHeadError:
        return False
    return True


def _variants(note: str, other_note: str) -> dict[str, str]:
    """Well-formed and malformed relatives of a signed note, each named."""
    text, block = note.split("\n\n")
    line = block.rstrip("\n")
    dash, name, encoded = line.split(" ")
    raw = base64.b64decode(encoded)
    other_line = other_note.split("\n\n")[1].rstrip("\n")
    return {
        "as signed": note,
        "a trailing blank line": note + "\n",
        "two trailing blank lines": note + "\n\n",
        "no final newline": note.rstrip("\n"),
        "no blank line": text + "\n" + block,
        "a carriage return": note.replace("\n", "\r\n", 1),
        "a tab in the text": note.replace(" ", "\t", 1) if " " in text else "\t" + note,
        "another key's line first": f"{text}\n\n{other_line}\n{line}\n",
        "another key's line after": f"{text}\n\n{line}\n{other_line}\n",
        "the line twice": f"{text}\n\n{line}\n{line}\n",
        "only another key's line": f"{text}\n\n{other_line}\n",
        "a hyphen for the dash": f"{text}\n\n- {name} {encoded}\n",
        "no space after the dash": f"{text}\n\n{dash}{name} {encoded}\n",
        "a '+' in the name": f"{text}\n\n{dash} {name}+x {encoded}\n",
        "an empty name": f"{text}\n\n{dash}  {encoded}\n",
        "no signature": f"{text}\n\n{dash} {name}\n",
        "base64 without padding": f"{text}\n\n{dash} {name} {encoded.rstrip('=')}\n",
        "not base64": f"{text}\n\n{dash} {name} {encoded[:-4]}!!!=\n",
        "another key's line with extra padding": f"{text}\n\n{line}\n{dash} other AAAAAAAA=\n",
        "another key's line padded inside": f"{text}\n\n{line}\n{dash} other AAAA====AAAA\n",
        "an invalid UTF-8 byte in the text": note.replace(text[:1], "\udcff", 1),
        "a four-byte signature": f"{text}\n\n{dash} {name} {base64.b64encode(raw[:4]).decode()}\n",
        "a space after the signature": f"{text}\n\n{dash} {name} {encoded} \n",
        "an empty signature line between": f"{text}\n\n{line}\n\n{line}\n",
        "a flipped signature bit": f"{text}\n\n{dash} {name} {base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()}\n",
        "101 signature lines": f"{text}\n\n{line}\n" + f"{other_line}\n" * 100,
        "100 signature lines": f"{text}\n\n{line}\n" + f"{other_line}\n" * 99,
        "a blank line inside the text": f"{text.replace(chr(10), chr(10) * 2, 1)}\n\n{line}\n",
    }


def test_go_opens_our_signed_heads_and_refuses_exactly_what_we_refuse(refcheck, tmp_path):
    key = generate_key("example.org/lab-ledger")
    other = generate_key("example.org/other-ledger")
    vkey = tmp_path / "key.pub"
    vkey.write_text(key.verifier().text() + "\n", encoding="utf-8")
    head = TreeHead(key.name, 1234, bytes(range(32)))
    notes = {
        **_variants(sign_tree_head(head, key), sign_tree_head(head, other)),
        **{
            f"plain note, {name}": text
            for name, text in _variants(sign_note("hello\n", key), sign_note("hello\n", other)).items()
        },
    }
    verdicts = {}
    for name, note in notes.items():
        file = tmp_path / "note"
        file.write_bytes(note.encode("utf-8", "surrogateescape"))  # \udcff is written as the byte 0xff
        go = _go(refcheck, "note", str(vkey), str(file))
        ours = _ours_opens(note, key.verifier())
        verdicts[name] = (ours, go.returncode == 0, go.stderr.strip())
        if ours:
            assert go.stdout == open_note(note, key.verifier()), name
    disagreements = {name: verdict for name, verdict in verdicts.items() if verdict[0] != verdict[1]}
    assert not disagreements, disagreements
    # both accept and both refuse something: the comparison can fail either way
    assert verdicts["as signed"][:2] == (True, True) and verdicts["a trailing blank line"][:2] == (False, False)
    assert (
        sum(ours for ours, _, _ in verdicts.values()) >= 6 and sum(not ours for ours, _, _ in verdicts.values()) >= 20
    )


def test_our_messages_name_the_malformation():
    key = generate_key("example.org/lab-ledger")
    note = sign_tree_head(TreeHead(key.name, 3, bytes(32)), key)
    with pytest.raises(SignedHeadError, match="malformed signed note: nothing after its last blank line"):
        open_note(note + "\n", key.verifier())
    with pytest.raises(SignedHeadError, match="control character '\\\\r'"):
        open_note(note.replace("\n", "\r\n", 1), key.verifier())
    with pytest.raises(SignedHeadError, match="101 signature lines"):
        line = note.split("\n\n")[1]
        open_note(note + line * 100, key.verifier())


def test_go_checks_our_inclusion_proofs_and_refuses_forged_ones(refcheck, tmp_path):
    key = generate_key("example.org/proofs")
    vkey = tmp_path / "key.pub"
    vkey.write_text(key.verifier().text() + "\n", encoding="utf-8")
    checked = 0
    with open_store(f"sqlite:///{tmp_path / 'ledger.db'}") as store:
        for index in range(70):
            store.append("note", {"index": index})
        leaves = [merkle.leaf_hash(entry["payload"].encode()) for entry in store.rows_of("chain_entries")]
        for size in (1, 2, 7, 64, 70):
            signed = sign_tree_head(TreeHead(key.name, size, merkle.merkle_root(leaves[:size])), key)
            for seq in sorted({1, size, (size + 1) // 2}):
                document = json.loads(json.dumps(prove(store, seq, signed_head=signed)))
                forged = dict(document, leaf_index=(document["leaf_index"] + 1) % size)
                bent = dict(document, payload=document["payload"].replace('"index":', '"index": '))
                for proof, expected in ((document, True), (forged, size == 1), (bent, False)):
                    file = tmp_path / "proof.json"
                    file.write_text(json.dumps(proof), encoding="utf-8")
                    go = _go(refcheck, "proof", str(vkey), str(file))
                    try:
                        check_proof(proof, key.verifier())
                        ours = True
                    except ProofError:
                        ours = False
                    assert (ours, go.returncode == 0) == (expected, expected), (size, seq, go.stderr)
                    checked += 1
    assert checked >= 30


def test_go_and_our_verifier_agree_on_consistency_proofs_at_every_edge(refcheck, tmp_path):
    leaves = [merkle.leaf_hash(bytes([index])) for index in range(9)]
    agreed = 0
    for new in range(10):
        for old in range(new + 2):
            new_root = merkle.merkle_root(leaves[:new])
            old_root = merkle.merkle_root(leaves[: min(old, 9)])
            proof = merkle.consistency_proof(leaves[:new], old, new) if old <= new else []
            for label, path in (("made", proof), ("empty", []), ("extra", [*proof, new_root])):
                file = tmp_path / "tree.json"
                document = {
                    "old_size": old,
                    "old_root": old_root.hex(),
                    "new_size": new,
                    "new_root": new_root.hex(),
                    "proof": [node.hex() for node in path],
                }
                file.write_text(json.dumps(document), encoding="utf-8")
                go = _go(refcheck, "tree", str(file)).returncode == 0
                ours = merkle.verify_consistency(old_root, old, new_root, new, path)
                assert ours == go, (old, new, label, ours, go)
                agreed += 1
    assert agreed > 150
