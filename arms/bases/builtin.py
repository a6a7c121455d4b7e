"""Built-in bases for machines with no model hub: a word-level tokenizer and tiny random-init models.

``builtin:tiny-qwen2`` (and ``builtin:tiny-qwen2?hidden=64&layers=4&seed=0``) is a
Qwen2-architecture causal LM initialised from a seed, paired with a word-level
tokenizer whose vocabulary is derived from the task generators themselves (every
word any surface or the Tier-1 rows can produce, the alphabets, numbers 0-999), so
every symbol is one token and nothing maps to unknown. They exist for seconds-long
protocols (``protocols/smoke.yaml``) and tests; real work loads real weights.
"""

from __future__ import annotations

import re
from functools import lru_cache

import torch

from ledger.protocol.bases import parse_builtin

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
_WORD = re.compile(r"\w+|[^\w\s]+")


@lru_cache(maxsize=1)
def vocabulary(numerals: int = 1000) -> tuple[str, ...]:
    """Every token the generators can emit, in a fixed order (specials first).

    ``numerals``: the numbers 0..numerals-1 are tokens (the Tier-1 rows use numbers up
    to ~160; a pretrained tiny base keeps its output layer small with 200).
    """
    from ledger.rows.tasks import generate_arithmetic, generate_rule_chasing
    from ledger.rows.tasks.alphabets import ALPHABETS

    words: set[str] = set()
    for alphabet in ALPHABETS.values():
        words.update(alphabet)
        for surface in ("symbolic", "relay", "pointer"):
            rows = generate_rule_chasing(
                surface=surface, symbols=alphabet, depth_range=(1, 2), rows_per_depth=1, seed=0, split="vocab"
            )
            for row in rows:
                words.update(_WORD.findall(row.prompt))
    for row in generate_arithmetic(seed=0, split="vocab", per_op=4):
        words.update(_WORD.findall(row.prompt))
    words.update(("Answer", "answer", "steps", ":", "->"))
    words = {word for word in words if not word.isdigit()}
    words.update(str(number) for number in range(numerals))
    return SPECIAL_TOKENS + tuple(sorted(words - set(SPECIAL_TOKENS)))


def word_tokenizer(numerals: int = 1000):
    """A ``PreTrainedTokenizerFast`` over ``vocabulary(numerals)``: " A" is the single token "A"."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(vocabulary(numerals))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )
    tokenizer.padding_side = "left"
    return tokenizer


def builtin_config(source: str):
    """The Qwen2Config of a built-in base (its shape, read from the source string)."""
    from transformers import Qwen2Config

    settings = parse_builtin(source)
    tokenizer = word_tokenizer()
    return Qwen2Config(
        vocab_size=len(vocabulary()),
        hidden_size=settings["hidden"],
        intermediate_size=settings["intermediate"],
        num_hidden_layers=settings["layers"],
        num_attention_heads=settings["heads"],
        num_key_value_heads=settings["kv_heads"],
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def tiny_random_base(source: str, dtype: torch.dtype = torch.float32):
    """(model, tokenizer) for a built-in base, initialised from its seed."""
    from transformers import AutoModelForCausalLM

    settings = parse_builtin(source)
    tokenizer = word_tokenizer()
    config = builtin_config(source)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(settings["seed"])
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=dtype)
    finally:
        torch.random.set_rng_state(generator_state)
    model.eval()
    return model, tokenizer
