"""What ``ledger run`` returns: per arm its outcome, for the run its claims and report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.protocol.protocol import Protocol


@dataclass
class ArmOutcome:
    arm: str
    status: str  # complete | hard_stop | skipped
    checkpoints: list[str] = field(default_factory=list)
    gates: list[dict] = field(default_factory=list)
    accuracy: dict[str, tuple[int, int]] = field(default_factory=dict)  # manifest -> (correct, n) at final loop
    tail: dict[str, tuple[int, int]] = field(default_factory=dict)
    losses: dict[str, float] = field(default_factory=dict)  # text manifest@loop -> nats per token (design M)
    note: str = ""


@dataclass
class RunResult:
    protocol: Protocol
    protocol_sha256: str
    out_dir: Path
    arms: list[ArmOutcome]
    claims: list[Any] = field(default_factory=list)
    claims_waiting_for: list[str] = field(default_factory=list)  # arms not finished in this ledger yet
    judged: bool = True  # False under --no-judge: claims and report left to a later pass
    report: Path | None = None
    versions: list[str] = field(default_factory=list)  # this version of how many, and each deviation's reason

    @property
    def hard_stopped(self) -> bool:
        return any(arm.status == "hard_stop" for arm in self.arms)
