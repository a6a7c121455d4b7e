"""The README's annotated protocol and claim file pass `ledger check` as written, with only the base's source
pointed at a model this machine has (a built-in random model of the same layer count)."""

from __future__ import annotations

import re
from pathlib import Path

from ledger.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_readmes_example_protocol_and_claims_pass_the_check(tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    protocol, claims = blocks[:2]
    assert "source: ../models/my-model" in protocol and "protocol: my-phaseA" in claims
    builtin = "builtin:tiny-qwen2?hidden=32&layers=24&heads=2&kv_heads=1&intermediate=64"
    (tmp_path / "protocols").mkdir()
    (tmp_path / "claims").mkdir()
    (tmp_path / "protocols" / "my-phaseA.yaml").write_text(
        protocol.replace("../models/my-model", f'"{builtin}"').replace("dtype: bfloat16", "dtype: float32")
    )
    (tmp_path / "claims" / "my-phaseA.yaml").write_text(claims)
    assert main(["check", str(tmp_path / "protocols" / "my-phaseA.yaml")]) == 0
