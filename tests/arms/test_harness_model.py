"""The lm-eval model (`arms.harness.HarnessModel`): what it scores is the recurrent forward's readout at loop T,
one pass equals reading each continuation token as its own answer position where every position recurs, loop 1
of an untrained split-bridge retrofit is the base, and greedy generation stops where lm-eval asks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arms.harness import HarnessModel
from arms.model.recurrent import RecurrentLM

pytestmark = pytest.mark.models

BASE = Path(__file__).resolve().parents[2] / "bases" / "tiny-base"


@pytest.fixture(scope="module")
def base():
    from arms.bases.loading import load_base

    model, tokenizer = load_base(str(BASE))  # the tokenizer the base was trained with
    return model.eval(), tokenizer


def _retrofit(model, reentry: str = "all") -> RecurrentLM:
    recurrent = RecurrentLM.build(model, split=(1, 3), reentry=reentry).eval()
    generator = torch.Generator().manual_seed(0)
    for parameter in recurrent.bridge.parameters():  # a bridge that is not the identity: loops matter
        parameter.data.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return recurrent


PAIRS = [("apply f to A", " B C"), ("x", " D"), ("", "A B"), ("what is A ", "B")]


@pytest.mark.parametrize("reentry", ["all", "answer"])
def test_a_continuation_is_scored_by_the_forward_readout_at_loop_T(base, reentry) -> None:
    model, tokenizer = base
    recurrent = _retrofit(model, reentry)
    harness = HarnessModel(loops=3, loaded=(recurrent, tokenizer))
    for context, continuation in PAIRS:
        context_ids, continuation_ids = harness.scorer.pair(context, continuation)
        expected, greedy = 0.0, True
        for j, token in enumerate(continuation_ids):  # independent: one forward per token, read at loop 3
            ids = torch.tensor([context_ids + continuation_ids[:j]])
            with torch.no_grad():
                logprobs = torch.log_softmax(recurrent(ids, loops=3)[2, 0].float(), -1)
            expected += float(logprobs[token])
            greedy = greedy and int(logprobs.argmax()) == token
        ((total, all_greedy),) = harness.scorer.score([(context_ids, continuation_ids)])
        assert total == pytest.approx(expected, abs=1e-4) and all_greedy == greedy


def test_one_pass_equals_each_token_as_its_own_row_where_every_position_recurs(base) -> None:
    model, tokenizer = base
    harness = HarnessModel(loops=3, loaded=(_retrofit(model, "all"), tokenizer), batch_size=3)
    assert harness.scorer.one_pass
    pairs = [harness.scorer.pair(*pair) for pair in PAIRS]
    one_pass = harness.scorer.score(pairs)
    harness.scorer.one_pass = False
    per_token = harness.scorer.score(pairs)
    assert [total for total, _ in one_pass] == pytest.approx([total for total, _ in per_token], abs=1e-4)
    assert [greedy for _, greedy in one_pass] == [greedy for _, greedy in per_token]
    answer = HarnessModel(loops=3, loaded=(_retrofit(model, "answer"), tokenizer))
    assert not answer.scorer.one_pass  # only the last position loops: each token is read as its own row


def test_loop_1_of_an_untrained_retrofit_is_the_base_and_loops_change_the_scores(base) -> None:
    model, tokenizer = base
    plain = HarnessModel(loaded=(model, tokenizer))
    untrained = HarnessModel(loops=1, loaded=(RecurrentLM.build(model, split=(1, 3)).eval(), tokenizer))
    pairs = [plain.scorer.pair(*pair) for pair in PAIRS]
    assert [t for t, _ in untrained.scorer.score(pairs)] == pytest.approx(
        [t for t, _ in plain.scorer.score(pairs)], abs=1e-5
    )
    looped = HarnessModel(loops=4, loaded=(_retrofit(model), tokenizer))
    assert [t for t, _ in looped.scorer.score(pairs)] != pytest.approx(
        [t for t, _ in plain.scorer.score(pairs)], abs=1e-3
    )
    with pytest.raises(ValueError, match="read once"):
        HarnessModel(loops=2, loaded=(model, tokenizer))


def test_greedy_generation_stops_at_a_stop_string_and_refuses_sampling(base) -> None:
    model, tokenizer = base
    harness = HarnessModel(loops=2, loaded=(_retrofit(model), tokenizer))
    free = harness.generate("apply f to A", {"max_gen_toks": 6})
    ids = tokenizer("apply f to A", add_special_tokens=False).input_ids
    expected: list[int] = []
    for _ in range(6):  # independent greedy decoding from the forward at loop 2
        with torch.no_grad():
            expected.append(int(harness.model(torch.tensor([ids + expected]), loops=2)[1, 0].argmax()))
    assert free == tokenizer.decode(expected, skip_special_tokens=True)
    stop = free[len(free) // 2 :][:1] or free[:1]
    cut = harness.generate("apply f to A", {"max_gen_toks": 6, "until": [stop]})
    assert stop not in cut and free.startswith(cut)
    with pytest.raises(ValueError, match="greedily"):
        harness.generate("x", {"do_sample": True})


def test_a_text_longer_than_the_model_is_scored_in_windows_and_a_too_long_continuation_is_refused(base) -> None:
    model, tokenizer = base
    harness = HarnessModel(loops=2, loaded=(_retrofit(model), tokenizer))
    text = "apply f to A then B then C then D and again A B C D"
    tokens = harness.scorer.encode(text)
    ((whole, _),) = harness.scorer.score([([harness.scorer.prefix_id], tokens)])
    assert harness.scorer.rolling(text) == pytest.approx(whole, abs=1e-4)  # one window: the plain sum
    harness.scorer.max_length = 5  # windows of 4 tokens, each after as much text as fits
    windowed = harness.scorer.rolling(text)
    assert windowed == windowed and windowed < 0 and windowed != pytest.approx(whole, abs=1e-3)
    with pytest.raises(ValueError, match="does not fit"):
        harness.scorer.score([([harness.scorer.prefix_id], tokens)])
