"""Dense arms (B, C, D): SFT data through the shared reader, batched greedy generation
with per-row stopping, and a short SFT that learns the direct target and EOS.

Uses a tiny random-init Qwen2 and a byte-level BPE tokenizer trained here on
rendered rows (no model hub), in which every ``" A".." P"`` is a single token.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from transformers import LogitsProcessor, LogitsProcessorList, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from arms.dense.generate import DenseGenerator, Generation, ReaderStoppingCriteria
from arms.dense.sft_data import (
    IGNORE_INDEX,
    build_sft_examples,
    collate_sft,
    direct_target,
    encode_sft_example,
    scratchpad_target,
    sft_example,
)
from arms.train.step import take_step
from ledger.reader.shared import Reader
from ledger.rows.manifest import Row
from ledger.rows.tasks import generate_rule_chasing, resolve_alphabet

pytestmark = pytest.mark.models

N16 = list(resolve_alphabet("N16"))
EOS = "<|endoftext|>"
PAD = "<pad>"


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


def _rows(depth_range=(1, 4), rows_per_depth=2, seed=0, split="train"):
    return generate_rule_chasing(
        surface="symbolic",
        symbols="N16",
        depth_range=depth_range,
        rows_per_depth=rows_per_depth,
        seed=seed,
        split=split,
    )


def _train_tokenizer(pad_is_eos: bool = False) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rows = _rows(depth_range=(1, 8), rows_per_depth=4, seed=0)
    corpus = [r.prompt + "\nAnswer:" + scratchpad_target(r) for r in rows]
    corpus += [" " + s for s in N16] * 20 + ["The final value is M.\n\n"]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token=EOS, pad_token=EOS if pad_is_eos else PAD)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models gain nothing from intra-op threads; on a shared CPU they lose a lot."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return _train_tokenizer()


@pytest.fixture(scope="module")
def reader(tok) -> Reader:
    return Reader(N16, tokenizer=tok)  # raises unless " A".." P" are single tokens


def _tiny_model(tok, seed: int = 0, initializer_range: float = 0.02) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=initializer_range,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    return Qwen2ForCausalLM(config).eval()


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _row(depth: int, path: list[str], row_id: str = "test_d01_00000") -> Row:
    """A hand-made rule-chasing row whose table is exactly its orbit plus one distractor."""
    table = {a: b for a, b in zip(path, path[1:])}
    table.setdefault("P", "A")
    table.setdefault(path[-1], path[0])
    lines = "\n".join(f"{k} -> {v}" for k, v in table.items())
    prompt = (
        "You are given a finite function f as a shuffled lookup table.\nFunction table:\n"
        f"{lines}\n\nStart value: {path[0]}\nApply f exactly {depth} times.\nWhat is the final value?"
    )
    return Row(
        row_id=row_id,
        task="rule_chasing",
        surface="symbolic",
        depth=depth,
        prompt=prompt,
        answer=path[-1],
        path=path,
        symbols=N16,
        table=table,
        start=path[0],
    )


# ---------------------------------------------------------------------------
# SFT data
# ---------------------------------------------------------------------------


def test_targets_match_released_format(reader):
    # The released arm C continuation of test_d01_00000 begins " steps: M answer: M".
    d1 = _row(1, ["N", "M"])
    assert scratchpad_target(d1) == " steps: M answer: M"
    assert direct_target(d1) == " M"
    d3 = _row(3, ["E", "K", "C", "O"], "test_d03_00000")
    assert scratchpad_target(d3) == " steps: K -> C -> O answer: O"
    assert direct_target(d3) == " O"
    # A generated row: hops are path[1..depth], joined by " -> ".
    row = _rows(depth_range=(5, 5), rows_per_depth=1)[0]
    assert scratchpad_target(row) == " steps: " + " -> ".join(row.path[1:]) + " answer: " + row.answer
    assert len(row.path) == 6
    # The shared reader reads every target (and the released runaway tail) to the answer.
    for r in (d1, d3, row):
        for text in (scratchpad_target(r), direct_target(r)):
            res = reader.read_text(text, r)
            assert res.prediction == r.answer and res.correct
    released = " steps: M answer: M answer: H answer: K answer: C answer: B"
    assert reader.read_text(released, d1).prediction == "M"
    assert reader.is_complete(" steps: M answer: M answer", d1)
    assert not reader.is_complete(" steps: M answer: M", d1)


def test_scratchpad_target_rejects_inconsistent_rows():
    bad = _row(2, ["N", "M", "K"]).model_copy(update={"path": ["N", "M"]})
    with pytest.raises(ValueError, match="depth\\+1"):
        scratchpad_target(bad)
    with pytest.raises(ValueError, match="mode"):
        build_sft_examples([bad], Reader(N16), mode="cot")


def test_examples_render_through_the_shared_reader(reader):
    rows = _rows()
    for mode, target in (("direct", direct_target), ("scratchpad", scratchpad_target)):
        examples = build_sft_examples(rows, reader, mode=mode)
        assert [e.row_id for e in examples] == [r.row_id for r in rows]
        for e, r in zip(examples, rows):
            assert e.prompt == reader.render(r) == r.prompt + "\nAnswer:"
            assert e.target == target(r)
            assert e.add_eos and e.add_special_tokens


@pytest.mark.parametrize("pad_is_eos", [False, True])
def test_collate_masks_prompt_and_padding_exactly(pad_is_eos, tok):
    tk = _train_tokenizer(pad_is_eos=True) if pad_is_eos else tok
    rd = Reader(N16, tokenizer=tk)
    rows = _rows(depth_range=(1, 3), rows_per_depth=1)
    examples = [
        sft_example(rows[0], rd, "direct"),
        sft_example(rows[2], rd, "scratchpad"),
        sft_example(rows[1], rd, "direct"),
    ]
    batch = collate_sft(examples, tk, max_length=256)
    eos, pad = tk.eos_token_id, tk.pad_token_id
    assert (pad == eos) == pad_is_eos
    seqs = []
    for e in examples:
        prompt = tk(e.prompt)["input_ids"]
        target = _ids(tk, e.target) + [eos]
        seqs.append((prompt, target))
    width = max(len(p) + len(t) for p, t in seqs)
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape == (3, width)
    assert batch["input_ids"].dtype == batch["labels"].dtype == torch.long
    for i, (prompt, target) in enumerate(seqs):
        fill = width - len(prompt) - len(target)
        assert batch["input_ids"][i].tolist() == prompt + target + [pad] * fill
        assert batch["labels"][i].tolist() == [IGNORE_INDEX] * len(prompt) + target + [IGNORE_INDEX] * fill
        assert batch["attention_mask"][i].tolist() == [1] * (len(prompt) + len(target)) + [0] * fill
    # Supervised tokens are exactly the targets and one EOS each (even when pad == eos).
    supervised = batch["labels"][batch["labels"] != IGNORE_INDEX].tolist()
    assert supervised == [t for _, ts in seqs for t in ts]
    assert supervised.count(eos) == 3
    # The prompt ids are the evaluation prefix the dense arm generates from.
    arm = DenseGenerator(_tiny_model(tk), tk, rd)
    ids, mask = arm.encode_rows([rows[0], rows[2]])
    for j, (prompt, _) in enumerate([seqs[0], seqs[1]]):
        assert ids[j][mask[j].bool()].tolist() == prompt
    # Direct target tokens: the answer symbol's single reader token, then EOS.
    assert encode_sft_example(examples[0], tk)[1][-2:] == [rd.symbol_token_ids[rows[0].answer], eos]
    with pytest.raises(ValueError, match="max_length"):
        collate_sft(examples, tk, max_length=width - 1)


# ---------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------


def _varied_rows():
    """Rows whose rendered prompts have different token lengths (so left padding matters)."""
    rows = _rows(depth_range=(1, 5), rows_per_depth=1, split="test")
    notes = ["", "Note: think. ", "", "Note: this is a long preamble before the table. ", "Hi. "]
    return [r.model_copy(update={"prompt": n + r.prompt}) for r, n in zip(rows, notes)]


def test_batched_left_padded_generation_equals_batch_one(tok, reader):
    model = _tiny_model(tok, seed=1, initializer_range=0.2)
    arm = DenseGenerator(model, tok, reader, mode="scratchpad")
    rows = _varied_rows()
    _, mask = arm.encode_rows(rows)
    assert len(set(mask.sum(1).tolist())) >= 3  # genuinely different prompt lengths
    single = arm.generate(rows, max_new_tokens=12, batch_size=1)
    for bs in (2, 5):
        batched = arm.generate(rows, max_new_tokens=12, batch_size=bs)
        assert [g.row_id for g in batched] == [r.row_id for r in rows]
        for a, b in zip(single, batched):
            assert a.token_ids == b.token_ids
            assert (a.text, a.tokens_generated, a.prediction, a.stop_reason) == (
                b.text,
                b.tokens_generated,
                b.prediction,
                b.stop_reason,
            )
        assert batched[0].batch_size == bs and batched[-1].batch_size == (len(rows) % bs or bs)
    # Greedy: the first token is the argmax of the plain forward pass at the last prompt position.
    ids, mask = arm.encode_rows(rows[:1])
    with torch.no_grad():
        first = model(input_ids=ids, attention_mask=mask).logits[0, -1].argmax().item()
    assert single[0].token_ids[0] == first
    assert all(1 <= g.tokens_generated <= 12 and g.tokens_generated == len(g.token_ids) for g in single)
    assert any(g.tokens_generated > 1 for g in single)


def test_generation_is_greedy_whatever_the_checkpoint_generation_config(tok, reader):
    from transformers import GenerationConfig

    model = _tiny_model(tok, seed=2, initializer_range=0.2)
    arm = DenseGenerator(model, tok, reader, mode="direct")
    rows = _varied_rows()[:2]
    plain = arm.generate(rows, max_new_tokens=10, batch_size=2)
    # Qwen2.5-Instruct ships sampling defaults and a repetition penalty; any logits
    # processor a checkpoint's config could switch on must stay off.
    qwen_like = GenerationConfig(
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
        repetition_penalty=1.5,
        no_repeat_ngram_size=1,
        suppress_tokens=[plain[0].token_ids[0]],
        min_new_tokens=5,
    )
    model.generation_config = qwen_like
    again = arm.generate(rows, max_new_tokens=10, batch_size=2)
    assert [g.token_ids for g in again] == [g.token_ids for g in plain]
    assert model.generation_config is qwen_like  # restored after the call
    # The first greedy token is the plain argmax of the forward pass.
    ids, mask = arm.encode_rows(rows[:1])
    with torch.no_grad():
        assert plain[0].token_ids[0] == model(input_ids=ids, attention_mask=mask).logits[0, -1].argmax().item()


class ScriptedLogits(LogitsProcessor):
    """Forces row i to emit scripts[i][k] at its k-th new token (then EOS)."""

    def __init__(self, scripts: list[list[int]], prompt_width: int, eos: int):
        self.scripts, self.width, self.eos = scripts, prompt_width, eos

    def __call__(self, input_ids, scores):
        k = input_ids.shape[1] - self.width
        forced = torch.full_like(scores, float("-inf"))
        for i, script in enumerate(self.scripts):
            forced[i, script[k] if k < len(script) else self.eos] = 0.0
        return forced


def test_stops_per_row_at_first_complete_answer_or_eos(tok, reader):
    model = _tiny_model(tok)
    arm = DenseGenerator(model, tok, reader, mode="scratchpad")
    d1 = _row(1, ["N", "M"], "test_d01_00000")
    eos = tok.eos_token_id
    cases = [
        # (row, script text, text the row must stop after, stop reason, prediction)
        (d1, " M\n\nThe final value is H. answer: H", None, "answer", "M"),
        (d1, " steps: M answer: M answer: H answer: K answer: C", " steps: M answer: M", "answer", "M"),
        (d1, " steps: N -> M -> K -> A -> B -> C -> D -> E -> F -> G -> H", None, "max_new_tokens", "N"),
        (_row(1, ["N", "K"], "test_d01_00001"), " steps: M answer: M answer: K", " steps: M answer: M", "answer", "M"),
    ]
    scripts = [_ids(tok, text) for _, text, _, _, _ in cases]
    scripts.append(_ids(tok, " K") + [eos] + _ids(tok, " answer: M"))  # EOS right after the answer
    rows = [c[0] for c in cases] + [_row(1, ["N", "K"], "test_d01_00002")]
    width = arm.encode_rows(rows)[0].shape[1]
    budget = 14
    out = arm.generate(
        rows,
        max_new_tokens=budget,
        batch_size=len(rows),
        logits_processor=LogitsProcessorList([ScriptedLogits(scripts, width, eos)]),
    )
    assert all(isinstance(g, Generation) for g in out)

    # 0: leading " M" is complete once one more character follows: " M" + "\n..." token.
    n0 = len(_ids(tok, " M")) + 1
    assert out[0].tokens_generated == n0 and out[0].token_ids == tuple(scripts[0][:n0])
    assert out[0].stop_reason == "answer" and out[0].prediction == "M" and out[0].correct
    assert out[0].text == tok.decode(scripts[0][:n0]) and out[0].text.startswith(" M\n")
    # 1: scratchpad stops at the token right after the first "answer: M".
    n1 = len(_ids(tok, cases[1][2])) + 1
    assert out[1].tokens_generated == n1 and out[1].token_ids == tuple(scripts[1][:n1])
    assert out[1].text == " steps: M answer: M answer"
    assert out[1].stop_reason == "answer" and out[1].prediction == "M" and out[1].correct and out[1].rule == "marker"
    # 2: never complete -> runs the whole budget (while the others have stopped), read by rule 3.
    assert out[2].tokens_generated == budget and out[2].stop_reason == "max_new_tokens"
    assert out[2].token_ids == tuple(scripts[2][:budget])
    assert out[2].prediction == "N" and not out[2].correct and out[2].rule == "first_symbol"
    # 3: a wrong answer is still a complete answer: stops, read as M, incorrect (target K).
    assert out[3].tokens_generated == n1 and out[3].prediction == "M" and not out[3].correct
    # 4: EOS stops; it counts as a generated token but is not in the text.
    assert out[4].stop_reason == "eos" and out[4].tokens_generated == 2
    assert out[4].token_ids == (scripts[4][0], eos) and out[4].text == " K"
    assert out[4].prediction == "K" and out[4].correct
    # Finished rows carry no padding: token counts differ within one batch.
    assert len({g.tokens_generated for g in out}) >= 3
    assert all(g.latency_s is not None and g.latency_s > 0 and g.batch_size == 5 for g in out)
    # The same rows one at a time give the same stop points.
    for i, row in enumerate(rows):
        w = arm.encode_rows([row])[0].shape[1]
        (g,) = arm.generate(
            [row],
            max_new_tokens=budget,
            batch_size=1,
            logits_processor=LogitsProcessorList([ScriptedLogits([scripts[i]], w, eos)]),
        )
        assert (g.token_ids, g.stop_reason, g.prediction) == (out[i].token_ids, out[i].stop_reason, out[i].prediction)


def test_stopping_criteria_returns_per_row_flags(tok, reader):
    d1 = _row(1, ["N", "M"])
    eos = tok.eos_token_id
    prompt = [5, 6]
    complete = _ids(tok, " M.")  # leading symbol followed by a character: complete
    running = _ids(tok, " steps: M answer: M")[: len(complete)]  # not yet complete
    ended = _ids(tok, " M")[: len(complete) - 1] + [eos]
    assert len(complete) == len(running) == len(ended) == 2
    crit = ReaderStoppingCriteria(reader, tok, [d1, d1, d1], prompt_width=2, eos_ids=[eos])
    done = crit(torch.tensor([prompt + complete, prompt + running, prompt + ended]), None)
    assert done.dtype == torch.bool and done.tolist() == [True, False, True]
    assert crit.stopped_at == [2, None, 2] and crit.reasons == ["answer", None, "eos"]
    # A finished row stays finished (its later tokens are padding and are not read).
    done = crit(torch.tensor([prompt + complete + [7], prompt + running + [7], prompt + ended + [7]]), None)
    assert done.tolist()[0] and done.tolist()[2] and crit.stopped_at[0] == 2


# ---------------------------------------------------------------------------
# SFT
# ---------------------------------------------------------------------------


def _sft_step(model, batch, optimizer) -> float:
    """The live training step (as a dense arm's stage takes it) on one SFT batch."""
    model.train()
    return take_step(optimizer, lambda: model(**batch).loss, model.parameters()).loss


def test_short_sft_learns_direct_targets_and_eos(tok, reader):
    torch.manual_seed(0)
    model = _tiny_model(tok, seed=0)
    rows = _rows(depth_range=(1, 4), rows_per_depth=1, seed=3)
    assert len({r.answer for r in rows}) >= 3
    batch = collate_sft(build_sft_examples(rows, reader, mode="direct"), tok, max_length=256)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = [_sft_step(model, batch, optimizer) for _ in range(80)]
    assert losses[-1] < 0.05 < losses[0]
    arm = DenseGenerator(model, tok, reader, mode="direct")
    out = arm.generate(rows, batch_size=4)
    for g, r in zip(out, rows):
        assert g.text == " " + r.answer, (g.row_id, g.text)
        assert g.stop_reason == "eos" and g.tokens_generated == 2
        assert g.prediction == r.answer and g.correct
    assert arm.predict(rows, batch_size=4) == [[r.answer] for r in rows]
    assert model.training  # generate ran in eval mode and gave back the train mode it found


def test_short_sft_learns_scratchpad_target(tok, reader):
    torch.manual_seed(0)
    model = _tiny_model(tok, seed=0)
    rows = [
        _rows(depth_range=(2, 2), rows_per_depth=1, seed=5)[0],
        _rows(depth_range=(3, 3), rows_per_depth=1, seed=5)[0],
    ]
    batch = collate_sft(build_sft_examples(rows, reader, mode="scratchpad"), tok)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(80):
        loss = _sft_step(model, batch, optimizer)
    assert loss < 0.05
    out = DenseGenerator(model, tok, reader, mode="scratchpad").generate(rows, batch_size=2)
    for g, r in zip(out, rows):
        assert g.text == scratchpad_target(r)
        assert g.stop_reason == "eos" and g.correct and g.rule == "marker"
        assert g.tokens_generated == len(_ids(tok, scratchpad_target(r))) + 1


@pytest.mark.parametrize("source", ["trained", "tiny-base-large-v2"])
def test_the_incremental_text_is_the_whole_decode_at_every_token(tok, source):
    """The stop rule reads each row's text chunk by chunk (tokenizers' DecodeStream); the chunks add up to the
    whole decode after every token, on this file's tokenizer and on a shipped base's (what the runner decodes)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from arms.dense.generate import _decode, _TextSoFar

    if source == "trained":
        tokenizer = tok
    else:
        tokenizer = AutoTokenizer.from_pretrained(Path(__file__).resolve().parents[2] / "bases" / source)
    g = torch.Generator().manual_seed(3)
    texts = [" steps: A -> B -> C answer: C", "The final value is M.\n\n", " N"] + [
        " " + " ".join(N16[int(i)] for i in torch.randint(len(N16), (12,), generator=g)) for _ in range(5)
    ]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        so_far = _TextSoFar(tokenizer)
        assert so_far.stream is not None  # the fast path is the one under test
        for k, token in enumerate(ids, start=1):
            assert so_far.push(token) == _decode(tokenizer, ids[:k])
        assert so_far.confirm() == so_far.text == _decode(tokenizer, ids)
