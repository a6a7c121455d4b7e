"""Every file the CLI reads, damaged every way a careless user or a motivated cheat might damage it, ends in one
located line and a documented exit code: never a traceback, never the catch-all "internal error" (exit 70), never a
hang. The inputs are real files (a proof, a signed head, a public key, a protocol, a claim file, a release mapping,
a fingerprint) put through seeded byte-level and structural mutations, plus the file-system cases (a FIFO, a
directory, a device, a file past its budget). The model-file parsers (a GGUF file, a safetensors file in a model
folder, read by ``ledger init``) get binary mutations too: a stated count or length overwritten with a lie. The
count of inputs tried is printed."""

from __future__ import annotations

import json
import os
import random
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from model_file_builders import valid_gguf, valid_safetensors_folder

from ledger.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = {0, 1, 2, 3, 4, 5}
MUTATIONS_PER_SEED = 30
MODEL_MUTATIONS = 150  # a binary header has more places to lie in than a text file has to break

MAPPING = """\
release: fuzzed
source: a mapping whose data files are not here
root: data
manifests:
  - id: rows
    file: rows.jsonl
    task: rule_chasing
    surface: symbolic
    fields: {row_id: id, prompt: question, answer: target, depth: depth}
predictions:
  - {arm: A, manifest: rows, file: arm_A.jsonl, prediction: prediction}
"""


def _structural(rng: random.Random, data: bytes) -> bytes:
    """One damage: a flipped byte, a cut, a spliced run, invalid UTF-8, a NUL, or a hostile document."""
    choice = rng.randrange(12)
    if not data:
        return b"\x00"
    at = rng.randrange(len(data))
    if choice == 0:
        return data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :]
    if choice == 1:
        return data[:at]
    if choice == 2:
        length = rng.randrange(1, 40)
        return data[:at] + data[rng.randrange(len(data)) :][:length] + data[at:]
    if choice == 3:
        return data[:at] + b"\xff\xfe\xc3" + data[at:]
    if choice == 4:
        return data[:at] + b"\x00" + data[at:]
    if choice == 5:
        return b"[" * 100_000 + b"]" * 100_000  # nested past any recursion limit
    if choice == 6:
        return b'{"leaf_index": ' + b"9" * 100_000 + b"}"  # past Python's integer-digit limit
    if choice == 7:
        return b"a: &a [x, x]\n" + b"".join(
            b"%c: &%c [*%c, *%c]\n" % (98 + i, 98 + i, 97 + i, 97 + i) for i in range(20)
        )
    if choice == 8:
        return data.replace(b"\n", b"\r\n")
    if choice == 9:
        return data + b"\n" * rng.randrange(1, 4)
    if choice == 10:
        return data[:at] + b"\t" + data[at:]
    text = data.decode("utf-8", "replace")
    words = text.split()
    if words:
        words[rng.randrange(len(words))] = rng.choice(["-1", "1e309", "null", "[]", "{}", "''", "9" * 30, "..", "/"])
    return " ".join(words).encode()


LIES = (1 << 60, (1 << 64) - 1, 1 << 33, 0, 7)


def _binary(rng: random.Random, data: bytes) -> bytes:
    """One damage of a binary model file: a stated size overwritten with a lie, or a structural damage."""
    if rng.random() < 0.6:
        at = rng.randrange(max(1, len(data) - 8))
        return data[:at] + struct.pack("<Q", rng.choice(LIES)) + data[at + 8 :]
    return _structural(rng, data)


MODEL_KINDS = ("gguf", "safetensors")


def _as_gguf(file: Path, tmp: Path) -> list[str]:
    gguf = file.with_suffix(".gguf")
    if file.exists():
        file.rename(gguf)
    return ["init", str(gguf), "--out-dir", str(tmp / "out")]


def _in_model_folder(file: Path, tmp: Path) -> list[str]:
    from model_file_builders import CONFIG

    folder = tmp / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    if file.exists():
        file.rename(folder / "model.safetensors")
    return ["init", str(folder), "--out-dir", str(tmp / "out")]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, tuple[bytes, Callable[[Path, Path], list[str]]]]:
    """Each file kind: (a valid file's bytes, the command line that reads a file of that kind)."""
    from ledger.audit.proofs import prove
    from ledger.audit.signed_head import TreeHead, generate_key, sign_tree_head
    from ledger.store import merkle, open_store

    folder = tmp_path_factory.mktemp("fuzz-seeds")
    db = folder / "ledger.db"
    key = generate_key("example.org/fuzz")
    with open_store(f"sqlite:///{db}") as store:
        for index in range(9):
            store.append("note", {"index": index})
        leaves = [merkle.leaf_hash(entry["payload"].encode()) for entry in store.rows_of("chain_entries")]
        head = sign_tree_head(TreeHead(key.name, 9, merkle.merkle_root(leaves)), key)
        proof = json.dumps(prove(store, 4, signed_head=head), indent=2)
    public = folder / "key.pub"
    public.write_text(key.verifier().text() + "\n", encoding="utf-8")
    note = folder / "head.note"
    note.write_text(head, encoding="utf-8")
    url = f"sqlite:///{db}"
    fingerprint = folder / "fingerprint.json"
    assert main(["fingerprint", "--db", url, "--out", str(fingerprint)]) == 0
    return {
        "proof": (proof.encode(), lambda file, tmp: ["verify-proof", str(file), "--key", str(public)]),
        "signed head": (
            head.encode(),
            lambda file, tmp: [
                "verify",
                str(ROOT / "claims" / "smoke.yaml"),
                "--db",
                url,
                "--trusted-head",
                str(file),
                "--key",
                str(public),
            ],
        ),
        "public key": (
            public.read_bytes(),
            lambda file, tmp: ["verify-proof", str(_write(tmp / "p.json", proof)), "--key", str(file)],
        ),
        "protocol": ((ROOT / "protocols" / "smoke.yaml").read_bytes(), lambda file, tmp: ["check", str(file)]),
        "claim file": (
            (ROOT / "claims" / "smoke.yaml").read_bytes(),
            lambda file, tmp: ["verify", str(file), "--db", url],
        ),
        "release mapping": (
            MAPPING.encode(),
            lambda file, tmp: ["import", str(file), "--db", f"sqlite:///{tmp / 'import.db'}"],
        ),
        "fingerprint": (fingerprint.read_bytes(), lambda file, tmp: ["compare", str(file), str(fingerprint)]),
        "gguf": (valid_gguf(folder / "model.gguf").read_bytes(), _as_gguf),
        "safetensors": (
            (valid_safetensors_folder(folder / "hf") / "model.safetensors").read_bytes(),
            _in_model_folder,
        ),
    }


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err, captured.out


def test_damaged_inputs_end_in_one_line_and_a_documented_exit_code(seeds, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LEDGER_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    tried = 0
    failures: list[str] = []
    for kind, (valid, command) in seeds.items():
        rng = random.Random(f"fuzz/{kind}")
        damage, count = (_binary, MODEL_MUTATIONS) if kind in MODEL_KINDS else (_structural, MUTATIONS_PER_SEED)
        inputs = [valid] + [damage(rng, valid) for _ in range(count)]
        for number, data in enumerate(inputs):
            case = tmp_path / f"case-{tried}"
            case.mkdir()
            file = case / "input"
            file.write_bytes(data)
            code, err, said = _run(command(file, case), capsys)
            tried += 1
            if code not in DOCUMENTED or "Traceback" in err + said or "internal error" in err:
                failures.append(f"{kind} #{number}: exit {code}: {err.strip()[:300]}")
            elif code == 2 and len(err.strip().splitlines()) != 1 and kind != "protocol":
                failures.append(f"{kind} #{number}: exit 2 with {len(err.strip().splitlines())} lines: {err[:300]}")
            elif code != 0 and not (err + said).strip():
                failures.append(f"{kind} #{number}: exit {code} with nothing said")
    print(f"fuzz: {tried} damaged or valid inputs tried over {len(seeds)} file kinds")
    assert not failures, "\n".join(failures[:20])
    model_kinds = len(MODEL_KINDS)
    assert tried == (len(seeds) - model_kinds) * (MUTATIONS_PER_SEED + 1) + model_kinds * (MODEL_MUTATIONS + 1)


@pytest.mark.parametrize("kind", ["proof", "signed head", "public key", "protocol", "claim file", "release mapping"])
def test_a_fifo_a_directory_a_device_and_a_file_past_its_budget_are_refused_in_one_line(seeds, kind, tmp_path, capsys):
    _, command = seeds[kind]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # a plain open would wait forever for a writer
    huge = tmp_path / "huge"
    with huge.open("wb") as handle:
        handle.truncate(1 << 30 | 1)  # sparse: past every budget without the disk
    cases = [(fifo, "is a FIFO"), (tmp_path, "is a directory"), (Path("/dev/zero"), "is a device"), (huge, "budget")]
    for path, said in cases[:1] + cases[2:] if kind == "claim file" else cases:  # verify reads a folder of claims
        code, err, _ = _run(command(path, tmp_path), capsys)
        lines = err.strip().splitlines()
        assert code == 2 and said in err and len(lines) == 1, (kind, path, code, err)


@pytest.mark.parametrize("command", [["head"], ["register", str(ROOT / "protocols" / "smoke.yaml")], ["db", "upgrade"]])
def test_a_database_url_naming_a_fifo_is_one_line_not_a_hang(command, tmp_path, capsys):
    fifo = tmp_path / "ledger.db"
    os.mkfifo(fifo)
    code, err, _ = _run([*command, "--db", f"sqlite:///{fifo}"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_a_database_that_refuses_mid_command_is_one_line_and_a_closed_pipe_is_quiet(tmp_path, capsys, monkeypatch):
    """A failure of the database itself (here a lock held by another writer) is the driver's one line, exit 2;
    a reader that closes the pipe early (`ledger query ... | head -1`) ends the command quietly, exit 0; and
    LEDGER_DEBUG=0 does not turn tracebacks on."""
    import sqlite3
    import subprocess
    import sys

    import ledger.store.engine as engine

    db = tmp_path / "ledger.db"
    monkeypatch.setenv("LEDGER_DEBUG", "0")
    monkeypatch.setattr(engine, "BUSY_TIMEOUT_MS", 200)  # the lock is not waited out for 30 s
    assert main(["db", "upgrade", "--db", f"sqlite:///{db}"]) == 0
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")  # no reader gets a shared lock while this is held
    capsys.readouterr()
    try:
        code = main(["head", "--db", f"sqlite:///{db}"])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "database is locked" in lines[0], lines
    many = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 200000) SELECT x FROM n"
    piped = subprocess.run(
        f"{sys.executable} -m ledger query {many!r} --db sqlite:///{db} --format csv | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.stdout.strip() and piped.stderr == "", piped.stderr
