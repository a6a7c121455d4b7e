"""What a run's collaborators (``RunRecords``, ``StageGates``, ``StageTraining``) read of the run they serve: the
protocol and its inputs, where the run writes, the device, and the few steps of the runner they call. A leaf:
the runner satisfies it, and no collaborator imports the runner back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ledger.protocol.protocol import Protocol as RegisteredProtocol
from ledger.rows.manifest import Manifest
from ledger.run.rehearsal import Rehearsal


class RunContext(Protocol):
    protocol: RegisteredProtocol
    protocol_dir: Path
    out_dir: Path
    device: Any  # torch.device: resolved once the run starts
    world: Any  # the torchrun world (``arms.train.distributed.World``)
    store: Any  # the ledger (``ledger.store.Store``), open while the run runs
    objects: Any  # the artifact store checkpoints are written to
    sha: Any  # the protocol's registered SHA-256, once registered
    compiled_arms: set[str]
    readers: dict[str, Any]
    manifests: dict[str, Manifest]
    manifest_sha: dict[str, str]
    rehearsal: Rehearsal
    status_ok: str

    def base(self, name: str) -> Any: ...

    def evaluate_rows(self, runtime: Any, arm: Any, manifest_id: str, rows: Any, progress: Any = None) -> Any: ...

    def evaluate_checkpoint(self, runtime: Any, arm: Any, run_id: str, checkpoint: str) -> None: ...

    def bar(self, label: str, total: int, show_loss: bool = False) -> Any: ...
