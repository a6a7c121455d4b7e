"""`ledger history` and verify's per-version line: every registered version of a protocol side by side, with
what changed, the rows each read, each claim's outcome per version, and the tuning registered before it."""

from __future__ import annotations

import json

from ledger.audit.history import version_story
from ledger.store import open_store
from tests.audit.test_verify import CLAIMS, PROTOCOL, by_id, run, verify_json, write_evidence

TUNING = """\
name: tiny-tune
version: 1
description: Tuning of arm A on development rows before the second version.
purpose: exploratory
seed: 7
bases:
  tiny: {source: ./weights/tiny, dtype: float32, num_layers: 4}
manifests:
  - {id: train, role: train, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 4, seed: 99, split: tune}
  - {id: dev, role: dev, generator: rule_chasing, alphabet: N16, depths: [1, 2], rows_per_depth: 4, seed: 99, split: tunedev}
arms:
  - {id: A, kind: recurrent, base: tiny, surgery: {split: [1, 2]}, bridge: {kind: split}, budget: {kind: full_block}, evaluation: {manifests: [dev]}}
"""


def test_two_versions_side_by_side(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL, encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    (tmp_path / "tune.yaml").write_text(TUNING, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 0
    write_evidence(tmp_path, db)
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    assert code == 0 and by_id(report)["A_accurate"]["versions"] is None  # one version: no line
    # tuning, then a second version (a recorded deviation), whose runs find A wrong everywhere
    assert run("register", "tune.yaml", "--db", db) == 0
    (tmp_path / "protocol.yaml").write_text(PROTOCOL.replace("split: [1, 3]", "split: [1, 2]"), encoding="utf-8")
    assert run("deviate", "protocol.yaml", "--db", db, "--reason", "block too deep", "--timing", "after_data") == 0
    write_evidence(tmp_path, db, prefix="v2", correct=lambda arm, row: arm == "B" and row.depth == 1)
    code, report = verify_json(db, "claims.yaml", "--record", capsys=capsys)
    verdicts = by_id(report)
    assert verdicts["A_accurate"]["outcome"] == "refuted"
    assert verdicts["A_accurate"]["versions"] == "refuted in version 2 of 2 registered; earlier versions: v1 supported"
    # version 2's A does not beat B: B_deep's precondition fails, and it is unverifiable, not supported
    assert verdicts["B_deep"]["versions"] == "unverifiable in version 2 of 2 registered; earlier versions: v1 supported"

    capsys.readouterr()
    assert run("history", "tiny-verify", "--db", db, "--json") == 0
    history = json.loads(capsys.readouterr().out)
    first, second = history["versions"]
    assert (first["version"], second["version"]) == (1, 2)
    assert first["deviations"] == [] and [d["item"] for d in second["deviations"]] == ["arms.A.surgery.split"]
    assert second["deviations"][0]["timing"] == "after_data" and second["deviations"][0]["reason"] == "block too deep"
    assert first["readings"] == [{"manifest": "eval", "readings": 48, "rows": 24}]
    assert second["readings"] == [{"manifest": "eval", "readings": 48, "rows": 24}]
    assert first["claims"] == {
        "tiny-verify/A_beats_B": "supported",
        "tiny-verify/A_accurate": "supported",
        "tiny-verify/B_deep": "supported",
    }
    assert second["claims"]["tiny-verify/A_accurate"] == "refuted"
    assert second["claims"]["tiny-verify/A_beats_B"] == "refuted"
    assert first["tuning"] == [] and [t["name"] for t in second["tuning"]] == ["tiny-tune"]
    # the text form puts the versions and the claims table side by side
    assert run("history", "tiny-verify", "--db", db) == 0
    text = capsys.readouterr().out
    assert "version 1 of 2" in text and "version 2 of 2" in text and "tuning before it: tiny-tune" in text
    assert "3 of 3 claims supported" in text and "0 of 3 claims supported" in text
    # the report puts the same side by side
    assert run("report", "tiny-verify", "--db", db, "--out", str(tmp_path / "report")) == 0
    html = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    versions = html[html.index('<section id="versions">') : html.index('<section id="lineage">')]
    assert "v1 of 2" in versions and "v2 of 2" in versions and "tiny-tune v1" in versions
    assert "arms.A.surgery.split (after_data): block too deep" in versions
    assert "<td>3 of 3</td>" in versions and "<td>0 of 3</td>" in versions
    assert "<td><code>tiny-verify/A_accurate</code></td><td>supported</td><td>refuted</td>" in versions
    # and its first screen says how many versions there are, and what led to each deviation
    lead = html[: html.index('<section id="claims">')]
    assert "tiny-verify: version 2 of 2 registered in this ledger" in lead
    assert "version 1 -&gt; 2 (after_data, 1 item(s)): block too deep" in lead
    with open_store(db, read_only=True) as store:
        v1 = store.protocols(name="tiny-verify")[0].sha256
        assert version_story(store, "tiny-verify", v1) == ["tiny-verify: version 1 of 2 registered in this ledger"]
    # an unknown protocol is one line, exit 2, and nothing is written
    assert run("history", "nope", "--db", db) == 2
    assert "no protocol 'nope' is registered" in capsys.readouterr().err


def test_the_version_story_names_the_files_own_version_where_earlier_ones_were_registered_elsewhere(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "protocol.yaml").write_text(PROTOCOL.replace("version: 1\n", "version: 5\n", 1), encoding="utf-8")
    (tmp_path / "claims.yaml").write_text(CLAIMS, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert run("register", "protocol.yaml", "--db", db) == 0
    with open_store(db, read_only=True) as store:
        (only,) = store.protocols(name="tiny-verify")
        assert version_story(store, "tiny-verify", only.sha256) == [
            "tiny-verify: version 1 of 1 registered in this ledger (its file's version 5)"
        ]
