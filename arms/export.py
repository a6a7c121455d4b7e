"""A retrofitted checkpoint as a model folder another program can load (``ledger export``).

The folder::

    base/                  the base as transformers writes it (config.json, weights, tokenizer)
    retrofit.safetensors   the checkpoint's own file, byte for byte (its SHA-256 is the ledger's)
    ledger-export.json     the registered protocol, the arm, the checkpoint's SHA-256, the reader
    README.md              how to load it

``load_exported(folder)`` rebuilds the arm from these alone (no ledger database, no hub):
the base from ``base/``, the arm's surgery, bridge and budget from the protocol in
``ledger-export.json`` (the same ``build_runtime`` the run used), then the retrofitted
tensors. For the adapter budget the tensors are the LoRA factors and the bridge: the
folder holds them as this loader reads them, not as a PEFT adapter folder (PEFT's
layout names modules of the dense base, and the adapters here live in the looped block).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST = "ledger-export.json"
WEIGHTS = "retrofit.safetensors"

_README = """# Retrofitted checkpoint {sha}

Arm `{arm}` of protocol `{protocol}` (registered as `{protocol_sha}`), exported by `ledger export`.

```python
from arms.export import load_exported

runtime = load_exported("{folder}")      # the arm as the run built it, on the CPU
runtime.model                           # a torch module: runtime.model(input_ids, attention_mask, loops=T)
runtime.reader                          # the shared reader the evidence was read with
readings = runtime.evaluate(rows, evaluation)   # per-row, per-loop readings, as in the ledger
```

`retrofit.safetensors` hashes to `{sha}`: the checkpoint the ledger records.
"""


@contextlib.contextmanager
def written_whole(out: Path) -> Iterator[Path]:
    """A folder filled under a temporary name and renamed to ``out`` at the end: a failure leaves nothing
    half-written (and an existing ``out`` is never touched)."""
    if out.exists():
        raise FileExistsError(f"{out} exists: choose a new --out folder")
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_export(base_model: Any, tokenizer: Any, checkpoint_file: Path, out: Path, meta: dict[str, Any]) -> Path:
    """Write the export folder: the untouched base, the checkpoint file, what rebuilds the arm."""
    with written_whole(out) as tmp:
        base_model.save_pretrained(tmp / "base")
        tokenizer.save_pretrained(tmp / "base")
        shutil.copyfile(checkpoint_file, tmp / WEIGHTS)
        (tmp / MANIFEST).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(
            _README.format(
                sha=meta["checkpoint_sha256"],
                arm=meta["arm"],
                protocol=meta["protocol"]["name"],
                protocol_sha=meta["protocol_sha256"],
                folder=out.name,
            ),
            encoding="utf-8",
        )
    return out


def load_exported(folder: str | Path, device: str = "cpu"):
    """The arm of an export folder, ready to read rows (an ``arms.runtime.ArmRuntime``)."""
    from arms.bases.loading import load_base
    from arms.device import place, resolve_device
    from arms.runtime import build_runtime
    from ledger.protocol.protocol import Protocol
    from ledger.reader.shared import Reader

    folder = Path(folder)
    from ledger.checked_file import check_in_place

    meta = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    # the readings (and lm-eval's release) name this hash: a swapped file is ArtifactMismatch, exit 4
    check_in_place(folder / WEIGHTS, meta["checkpoint_sha256"], f"export {folder.name}")
    protocol = Protocol.model_validate(meta["protocol"])
    arm = protocol.arm(meta["arm"])
    spec = protocol.bases[arm.base]
    model, tokenizer = load_base(str(folder / "base"), dtype=spec.dtype)
    model = place(model, resolve_device(device))
    reader = Reader(meta["reader"]["symbols"], tokenizer=tokenizer, chat_template=meta["reader"]["chat_template"])
    runtime = build_runtime(arm, model, tokenizer, reader)
    runtime.load(folder / WEIGHTS)
    runtime.model.eval()
    return runtime
