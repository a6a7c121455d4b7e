"""A retrofitted arm as a Hugging Face model folder (``ledger export --format hf``).

A recurrent arm becomes::

    config.json                    model_type ledger_recurrent: the base's config, the cut, the bridge, num_loops
    model.safetensors              the base's tensors, the bridge's, and the adapter arm's merged loop block
    modeling_ledger_recurrent.py   the model (torch and transformers only), found through config.json's auto_map
    ledger_loop.py                 the loop's pieces the run computes with too (context, layers, step, families)
    ledger_bridge.py, bridge_*.py  the bridge's own file as the run imports it, and the name of its class
    tokenizer files, generation_config.json
    ledger-provenance.json         the checkpoint, its arm and stage, the registered protocol, the reader's symbols
    README.md                      how to load it, run it at T loops, and evaluate it with lm-eval

which ``AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, num_loops=T)`` loads without the
ledger. A dense arm is its fine-tuned base, written as transformers writes it (no remote code).

The adapter arm (LoRA on the block, off at loop 1) is written with its LoRA merged into a second copy of the
block's layers that loops >= 2 run (``loop_block``), as the ledger's own evaluation reads it. It is not written
as a PEFT adapter: PEFT attaches an adapter to a module for every call, and here the same block layers run
without it at loop 1 and with it from loop 2, which PEFT's adapter layout cannot say.
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path
from typing import Any, cast

import torch

import arms.hf.ledger_loop as ledger_loop
from arms.hf import modeling_ledger_recurrent as modeling

MODELING_FILE = Path(modeling.__file__)
LOOP_FILE = Path(ledger_loop.__file__)
BRIDGE_NAME = "ledger_bridge.py"  # names the bridge's class for the model file (``shipped_bridge``)
PROVENANCE = "ledger-provenance.json"

_CARD = """# {arm} of `{protocol}`, retrofitted with depth recurrence

Checkpoint `{sha}` (arm `{arm}`, stage `{stage}`) of protocol `{protocol}` version {version}, registered as
`{protocol_sha}`. Written by `ledger export --format hf`; `ledger-provenance.json` says where it came from.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("{folder}", trust_remote_code=True, num_loops={loops})
tokenizer = AutoTokenizer.from_pretrained("{folder}", trust_remote_code=True)  # the config is remote code
ids = tokenizer("...", return_tensors="pt")
model(**ids).logits                          # every position's logits after {loops} loops
model(**ids, num_loops=8).logits             # another loop count for one call
model.generate(**ids, max_new_tokens=16)     # greedy decoding, the whole sequence run again at each token
```

lm-eval's own model: `lm_eval --model hf --model_args pretrained={folder},trust_remote_code=True,num_loops={loops}`.

{design}
"""

_DESIGNS = {
    "S": "Design S: prelude layers {prelude}, the block {block} looped, coda layers {coda}; loop 1 is the base's "
    "route, and each later loop re-enters the block through the `{bridge}` bridge ({reentry} positions re-enter).",
    "M": "Design M: prelude layers {prelude}, the block {block} looped, coda layers {coda}; every loop enters the "
    "block through the `{bridge}` bridge from an initial state ({initial}).",
}


def hf_config(model: Any, num_loops: int) -> modeling.LedgerRecurrentConfig:
    """The config of a ``RecurrentLM`` (or its adapter subclass): its base's config, cut, bridge and loop options."""
    from arms.model.budgets import AdapterRecurrentLM

    bridge = model.bridge
    base = model.base.config.to_dict()
    config = modeling.LedgerRecurrentConfig(
        base=base,
        prelude_layers=list(model.surgery.prelude_idx),
        block_layers=list(model.surgery.block_idx),
        coda_layers=list(model.surgery.coda_idx),
        bridge=None if bridge is None else bridge.kind,
        bridge_options={} if bridge is None else bridge.export_options(),
        reentry=model.reentry,
        initial_state=model.s0,
        initial_state_sigma=model.s0_sigma,
        initial_state_seed=model.s0_seed,
        loop_block=isinstance(model, AdapterRecurrentLM),
        num_loops=num_loops,
        dtype=str(next(model.base.parameters()).dtype).removeprefix("torch."),
    )
    config.auto_map = {
        "AutoConfig": f"{MODELING_FILE.stem}.LedgerRecurrentConfig",
        "AutoModelForCausalLM": f"{MODELING_FILE.stem}.LedgerRecurrentForCausalLM",
    }
    config.architectures = ["LedgerRecurrentForCausalLM"]
    return config


def hf_model(model: Any, num_loops: int) -> modeling.LedgerRecurrentForCausalLM:
    """The Hugging Face model holding exactly the tensors ``model`` computes with. The adapter arm's LoRA is merged
    into the loop block copy, then unloaded from the base (PEFT ``unload``: the base's own weights, bit for bit).
    Loading is strict: a tensor with no place in the Hugging Face model, or a place left empty, is an error."""
    from arms.model.budgets import AdapterRecurrentLM, merged_block_copy, unload_adapter

    config = hf_config(model, num_loops)
    loop_block: dict[str, torch.Tensor] = {}
    if isinstance(model, AdapterRecurrentLM):
        loop_block = {f"loop_block.{key}": value for key, value in merged_block_copy(model).state_dict().items()}
        model = unload_adapter(model)
    tensors = {key: value for key, value in model.state_dict().items() if key.startswith(("base.", "bridge."))}
    out = modeling.LedgerRecurrentForCausalLM(config, bridge_class=None if model.bridge is None else type(model.bridge))
    out.load_state_dict({**tensors, **loop_block}, strict=True)
    dtype = next(model.base.parameters()).dtype
    return out.to(dtype).eval()


def write_hf_export(runtime: Any, out: Path, provenance: dict[str, Any], num_loops: int) -> Path:
    """Write the folder (whole or not at all: ``written_whole``)."""
    from transformers.utils import logging as transformers_logging

    from arms.bases.tokenization_word_level import ship_word_level_tokenizer
    from arms.export import written_whole
    from arms.model.recurrent import RecurrentLM

    transformers_logging.disable_progress_bar()  # the command prints one line of its own
    with written_whole(out) as tmp:
        model = runtime.model
        if isinstance(model, RecurrentLM):
            exported = hf_model(model, num_loops)
            exported.save_pretrained(tmp)
            ship_model_files(exported.bridge, tmp)
            card = _card(cast(modeling.LedgerRecurrentConfig, exported.config), model.design, provenance, out.name)
        else:  # a dense arm: its fine-tuned base as it is
            model.save_pretrained(tmp)
            card = _card(None, "", provenance, out.name)
        runtime.tokenizer.save_pretrained(tmp)
        ship_word_level_tokenizer(tmp)  # AutoTokenizer reads a tiny base's word-level tokenizer as it is
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out


def ship_model_files(bridge: torch.nn.Module | None, folder: Path) -> None:
    """The model file, the loop's pieces, and the bridge's own source file with ``ledger_bridge.py`` naming its
    class (a bridge's file needs torch only: ``arms.hf.ledger_loop.Bridge``)."""
    shutil.copyfile(MODELING_FILE, folder / MODELING_FILE.name)
    shutil.copyfile(LOOP_FILE, folder / LOOP_FILE.name)
    if bridge is None:
        (folder / BRIDGE_NAME).write_text('"""The arm has no bridge."""\n\nBridge = None\n', encoding="utf-8")
        return
    source = Path(cast(str, inspect.getsourcefile(type(bridge))))
    if source.name in (BRIDGE_NAME, MODELING_FILE.name, LOOP_FILE.name):
        raise ValueError(f"--format hf: the bridge's file may not be named {source.name}")
    shutil.copyfile(source, folder / source.name)
    name = type(bridge).__name__
    (folder / BRIDGE_NAME).write_text(
        f'"""The bridge of this export: {name} of {source.name}, as the run computed with it."""\n\n'
        f'from .{source.stem} import {name} as Bridge\n\n__all__ = ["Bridge"]\n',
        encoding="utf-8",
    )


def _card(
    config: modeling.LedgerRecurrentConfig | None, design_letter: str, provenance: dict[str, Any], folder: str
) -> str:
    protocol = provenance["protocol"]
    if config is None:
        design = "A dense arm: the base fine-tuned, with no recurrence; it loads without trust_remote_code."
        loops = 1
    else:
        design = _DESIGNS[design_letter].format(
            bridge=config.bridge,
            prelude=config.prelude_layers,
            block=config.block_layers,
            coda=config.coda_layers,
            reentry=config.reentry,
            initial=config.initial_state,
        )
        if config.loop_block:
            design += (
                " Loops >= 2 run a copy of the block with the arm's LoRA merged in (`loop_block`); loop 1 runs the "
                "base's block without it."
            )
        loops = config.num_loops
    return _CARD.format(
        arm=provenance["arm"],
        protocol=protocol["name"],
        version=protocol["version"],
        protocol_sha=provenance["protocol_sha256"],
        sha=provenance["checkpoint_sha256"],
        stage=provenance["stage"],
        folder=folder,
        loops=loops,
        design=design,
    )
