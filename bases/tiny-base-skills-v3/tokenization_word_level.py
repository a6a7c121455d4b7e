"""The word-level tokenizer of a pretrained tiny base, as ``AutoTokenizer`` loads it from the folder.

A tiny base's tokenizer is a plain ``tokenizers`` word-level tokenizer (``tokenizer.json``), but its
``config.json`` says ``model_type: qwen2``, and transformers 5 then rebuilds it as a Qwen2 BPE over the same
vocabulary, which spells "Question" letter by letter. Transformers lets a folder override that only through
remote code: ``ship_word_level_tokenizer`` copies this file into the folder and names its class in
``tokenizer_config.json``'s ``auto_map``, so that ``AutoTokenizer.from_pretrained(folder, trust_remote_code=True)``
reads the folder's own ``tokenizer.json`` as it is. This file needs transformers only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import PreTrainedTokenizerFast

WORD_LEVEL = ("TokenizersBackend", "PreTrainedTokenizerFast")  # what a plain ``tokenizers`` tokenizer declares


class WordLevelTokenizer(PreTrainedTokenizerFast):
    """The folder's ``tokenizer.json``, read as it is (no model-type tokenizer rebuilt over its vocabulary)."""


def ship_word_level_tokenizer(folder: Path) -> bool:
    """Where ``folder``'s tokenizer is a plain ``tokenizers`` one, ship this file beside it and name its class in
    ``auto_map``; returns whether it did (a model family's own tokenizer is left as it is)."""
    config_file = folder / "tokenizer_config.json"
    if not config_file.is_file():
        return False
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("tokenizer_class") not in WORD_LEVEL:
        return False
    here = Path(__file__)
    shutil.copyfile(here, folder / here.name)
    config["auto_map"] = {"AutoTokenizer": [None, f"{here.stem}.{WordLevelTokenizer.__name__}"]}
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return True
