"""The tiny-base pretraining recipe, its synthetic corpus and a 3-step run of the real code path."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from arms.bases.corpus import excluded_tier1_questions, heldout_lookups, symbols_at, synthetic_corpus
from arms.bases.recipe import ANSWER_SUFFIX, load_recipe
from ledger.rows.tasks.alphabets import N16, N24

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "bases" / "tiny-base.recipe.yaml"
TABLE_LINE = re.compile(r"^(\S+) -> (\S+)$", re.M)
QUESTION = re.compile(r"Start value: (\S+)\nApply f exactly (\d+) times\.\nWhat is the final value\?$")


@pytest.fixture(scope="module")
def recipe():
    return load_recipe(RECIPE)


def _sample_steps(recipe):
    """Steps from every curriculum stage, the first ones included."""
    steps = set(range(40))
    for stage in recipe.curriculum:
        steps.update(range(stage.start_step, stage.start_step + 10))
    steps.add(recipe.steps - 1)
    return sorted(steps)


def test_corpus_is_deterministic_per_seed_and_step(recipe):
    first = synthetic_corpus(recipe, 17)
    assert first == synthetic_corpus(recipe, 17)
    assert len(first) == recipe.batch_size
    assert [e.text for e in first] != [e.text for e in synthetic_corpus(recipe, 18)]
    other_seed = recipe.model_copy(update={"seed": recipe.seed + 1})
    assert [e.text for e in first] != [e.text for e in synthetic_corpus(other_seed, 17)]


def test_corpus_has_every_kind_and_follows_the_curriculum(recipe):
    for stage in recipe.curriculum:
        steps = range(stage.start_step, stage.start_step + 20)
        kinds = {e.kind for step in steps for e in synthetic_corpus(recipe, step)}
        assert kinds == {k for k, w in (stage.mixture or recipe.mixture).items() if w > 0}
    for stage in recipe.curriculum:
        if stage.mixture is not None and not stage.mixture.get("lookup"):
            continue
        sizes = {
            len(TABLE_LINE.findall(e.prompt))
            for step in range(stage.start_step, stage.start_step + 10)
            for e in synthetic_corpus(recipe, step)
            if e.kind == "lookup"
        }
        assert max(sizes) == stage.max_symbols == symbols_at(recipe, stage.start_step)


def test_no_trained_example_ever_iterates(recipe):
    """Every supervised table question says d = 1 and its answer is the ONE-hop value."""
    lookups = recalls = starts = 0
    for step in _sample_steps(recipe):
        for example in synthetic_corpus(recipe, step):
            # no text anywhere in the corpus states a depth other than 1 (or 0: the start recall)
            stated = set(re.findall(r"exactly (\d+) times", example.text))
            if example.kind == "start":  # depth 0: the answer is the start value itself
                assert stated == {"0"}
                start = QUESTION.search(example.prompt.replace("exactly 0 times", "exactly 1 times")).group(1)
                assert example.answer == " " + start
                starts += 1
                continue
            assert stated <= {"1"}
            if example.kind != "lookup":
                assert "Apply f" not in example.text
                continue
            table = dict(TABLE_LINE.findall(example.prompt))
            assert len(table) == len(TABLE_LINE.findall(example.prompt))  # every key once
            segments = example.segments()
            assert segments[0][0] == example.prompt + ANSWER_SUFFIX  # the protocol's exact prompt first
            for context, answer in segments:
                if context.endswith(" ->"):  # a recalled table line: "\nM ->" then " J"
                    key = context[:-3].rsplit("\n", 1)[-1]
                    assert answer == " " + table[key]
                    recalls += 1
                    continue
                assert context.endswith(ANSWER_SUFFIX)
                start, depth = QUESTION.search(context[: -len(ANSWER_SUFFIX)]).groups()
                assert depth == "1"
                assert answer == " " + table[start]
                lookups += 1
    assert lookups > 500 and starts > 0
    assert recalls > 0 or recipe.lookup_recalls == (0, 0)


def test_repeated_sequences_supervise_exactly_the_second_showing(recipe):
    """The induction stage: a sequence, then the same sequence again; only the repeat is a target."""
    repeats = [e for e in synthetic_corpus(recipe, 0) if e.kind == "repeat"]
    assert len(repeats) == recipe.batch_size  # the first stage is all repeats
    for example in repeats:
        ((context, answer),) = example.segments()
        shown, again = context.split(), answer.split()
        half = (len(shown) + len(again)) // 2
        assert recipe.repeat_length[0] <= half <= recipe.repeat_length[1]
        assert shown[:half] + shown[half:] + again == shown[:half] * 2
        assert "Answer" not in example.text


def test_every_numeral_occurs_in_the_corpus(recipe):
    seen = set()
    for step in range(40):
        for example in synthetic_corpus(recipe, step):
            seen.update(re.findall(r"\b\d+\b", example.text))
    assert {str(n) for n in range(31)} <= seen


def test_corpus_never_holds_a_tier1_question(recipe):
    from ledger.rows.tasks import generate_arithmetic

    excluded = excluded_tier1_questions(recipe)
    tier1 = generate_arithmetic(seed=20260707, split="tier1", per_op=16)  # protocols/phaseA.yaml
    assert {row.prompt.split("\n", 1)[0] for row in tier1} <= excluded
    for step in range(60):
        for example in synthetic_corpus(recipe, step):
            assert example.prompt.split("\n", 1)[0] not in excluded or example.kind != "choice"


def test_heldout_rows_use_the_protocol_alphabets(recipe):
    rows = heldout_lookups(recipe, 16)
    assert len(rows) == recipe.eval_rows
    assert all(symbols == sorted(N16) for _, symbols in rows)
    train = {e.prompt for step in range(0, 200, 7) for e in synthetic_corpus(recipe, step)}
    assert not train & {example.prompt for example, _ in rows}


def test_pretrain_base_three_steps_round_trip(tmp_path, recipe):
    import torch

    from arms.bases.loading import load_base
    from arms.bases.pretrain import pretrain_base, verify_base_hash
    from ledger.reader.shared import Reader

    out = tmp_path / "tiny-pretrained"
    threads = torch.get_num_threads()
    summary = pretrain_base(RECIPE, out, max_steps=3, progress=False)
    assert torch.get_num_threads() == threads
    assert not (tmp_path / ".tiny-pretrained.partial").exists()
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "recipe.yaml",
        "SHA256",
        "summary.json",
        "train.log",
    ):
        assert (out / name).is_file(), name
    assert summary["steps"] == 3 and summary["recipe_steps"] == recipe.steps
    assert torch.isfinite(torch.tensor(summary["final_loss"]))
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    assert verify_base_hash(out) == digest
    assert (out / "SHA256").read_text() == f"{digest}  model.safetensors\n"
    assert json.loads((out / "summary.json").read_text())["model_sha256"] == digest
    assert (out / "recipe.yaml").read_bytes() == RECIPE.read_bytes()
    log = [json.loads(line) for line in (out / "train.log").read_text().splitlines()]
    assert [r["event"] for r in log][0] == "start" and log[-1]["event"] == "end"
    assert any(r["event"] == "eval" for r in log)

    with pytest.raises(FileExistsError):
        pretrain_base(RECIPE, out, max_steps=1, progress=False)

    model, tokenizer = load_base(str(out))
    assert type(model).__name__ == "Qwen2ForCausalLM"
    from arms.bases.builtin import word_tokenizer

    text = heldout_lookups(recipe, 16)[0][0].prompt + ANSWER_SUFFIX + " steps: A -> B answer: B"
    # loaded from the folder, the tokenizer is the word-level one it was trained with (not a BPE rebuild)
    assert tokenizer.encode(text, add_special_tokens=False) == word_tokenizer(recipe.vocab_numerals).encode(
        text, add_special_tokens=False
    )
    assert sum(p.numel() for p in model.parameters()) == summary["parameters"]
    for alphabet in (N16, N24):
        reader = Reader(alphabet, tokenizer=tokenizer)  # raises unless each " X" is one known token
        assert len(set(reader.symbol_token_ids.values())) == len(alphabet)
    example, _ = heldout_lookups(recipe, 24)[0]
    ids = tokenizer(example.prompt + ANSWER_SUFFIX, return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    assert torch.isfinite(logits).all()


def test_verify_base_hash_refuses_a_changed_file(tmp_path):
    from arms.bases.pretrain import verify_base_hash

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()
    (tmp_path / "SHA256").write_text(f"{digest}  model.safetensors\n")
    assert verify_base_hash(tmp_path) == digest
    assert verify_base_hash(tmp_path, expected=digest) == digest
    with pytest.raises(ValueError, match="expected"):
        verify_base_hash(tmp_path, expected="0" * 64)
    (tmp_path / "model.safetensors").write_bytes(b"weights!")
    with pytest.raises(ValueError, match="SHA256 says"):
        verify_base_hash(tmp_path)


def test_every_corpus_and_protocol_text_is_known_to_the_recipes_vocabulary(recipe):
    """The small vocabulary (numerals below vocab_numerals) still spells every text the base will read."""
    from arms.bases.builtin import word_tokenizer
    from ledger.rows.tasks import generate_arithmetic, generate_rule_chasing
    from ledger.rows.tasks.alphabets import N16

    tokenizer = word_tokenizer(recipe.vocab_numerals)
    unknown = tokenizer.unk_token_id
    texts = [e.text for step in _sample_steps(recipe) for e in synthetic_corpus(recipe, step)]
    texts += [
        row.prompt + ANSWER_SUFFIX + " " + row.answer
        for row in generate_arithmetic(seed=20260707, split="tier1", per_op=16)
    ]
    rows = generate_rule_chasing(
        surface="symbolic", symbols=N16, depth_range=(1, 14), rows_per_depth=2, seed=1, split="x"
    )
    texts += [
        row.prompt + ANSWER_SUFFIX + " steps: " + " -> ".join(row.path[1:]) + " answer: " + row.answer for row in rows
    ]
    for text in texts:
        assert unknown not in tokenizer.encode(text, add_special_tokens=False), text
    assert len(tokenizer) == len(word_tokenizer()) - (1000 - recipe.vocab_numerals)


def _grown_recipe(tmp_path, **init_from):
    """A copy of the tiny-base recipe that starts from the shipped base (``init_from``)."""
    import yaml

    data = yaml.safe_load(RECIPE.read_text())
    digest = (ROOT / "bases" / "tiny-base" / "SHA256").read_text().split()[0]
    data["init_from"] = {"path": str(ROOT / "bases" / "tiny-base"), "sha256": digest, **init_from}
    if "layers" in init_from:
        data["model"]["layers"] = len(init_from["layers"])
    path = tmp_path / "grown.recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_init_from_continues_the_source_and_grows_it_as_an_identity(tmp_path):
    """One-to-one: the new model IS the source; grown with identity layers: it computes the
    source exactly (block expansion), while its copied layers hold the source's weights."""
    import torch

    from arms.bases.builtin import word_tokenizer
    from arms.bases.loading import load_base
    from arms.bases.pretrain import build_model, initialise_from

    source, _ = load_base(str(ROOT / "bases" / "tiny-base"))
    example, _ = heldout_lookups(load_recipe(RECIPE), 16)[0]
    tokenizer = word_tokenizer(load_recipe(RECIPE).vocab_numerals)
    ids = tokenizer(example.prompt + ANSWER_SUFFIX, return_tensors="pt")
    with torch.no_grad():
        expected = source(**ids).logits

    same = load_recipe(_grown_recipe(tmp_path))
    model = build_model(same, tokenizer)
    record = initialise_from(model, same, tmp_path)
    assert record["init_from_layers"] == [0, 1, 2, 3]
    for name, tensor in source.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name

    grown = load_recipe(_grown_recipe(tmp_path, layers=[0, 0, 1, 1, 2, 2, 3, 3], identity_layers=[1, 3, 5, 7]))
    model = build_model(grown, tokenizer)
    initialise_from(model, grown, tmp_path)
    with torch.no_grad():
        assert torch.equal(model(**ids).logits, expected)
    state = model.state_dict()
    assert torch.equal(
        state["model.layers.4.self_attn.q_proj.weight"], source.state_dict()["model.layers.2.self_attn.q_proj.weight"]
    )
    assert torch.equal(
        state["model.layers.5.self_attn.q_proj.weight"], source.state_dict()["model.layers.2.self_attn.q_proj.weight"]
    )
    assert not state["model.layers.5.mlp.down_proj.weight"].any()
    assert torch.equal(
        state["model.layers.4.mlp.down_proj.weight"], source.state_dict()["model.layers.2.mlp.down_proj.weight"]
    )

    # without the identity layers the duplicated layers change the function
    plain = load_recipe(_grown_recipe(tmp_path, layers=[0, 0, 1, 1, 2, 2, 3, 3]))
    model = build_model(plain, tokenizer)
    initialise_from(model, plain, tmp_path)
    with torch.no_grad():
        assert not torch.equal(model(**ids).logits, expected)


def test_init_from_refuses_a_wrong_hash_a_missing_layer_and_a_bad_map(tmp_path):
    from arms.bases.builtin import word_tokenizer
    from arms.bases.pretrain import build_model, initialise_from
    from ledger.protocol.loader import ProtocolError

    tokenizer = word_tokenizer(load_recipe(RECIPE).vocab_numerals)
    wrong = load_recipe(_grown_recipe(tmp_path)).model_copy(deep=True)
    wrong = wrong.model_copy(update={"init_from": wrong.init_from.model_copy(update={"sha256": "0" * 64})})
    with pytest.raises(ValueError, match="expects 0000"):
        initialise_from(build_model(wrong, tokenizer), wrong, tmp_path)
    beyond = load_recipe(_grown_recipe(tmp_path, layers=[0, 1, 2, 3, 4]))
    with pytest.raises(ValueError, match="the source has 4 layers"):
        initialise_from(build_model(beyond, tokenizer), beyond, tmp_path)
    import yaml

    data = yaml.safe_load(_grown_recipe(tmp_path, layers=[0, 1, 2, 3]).read_text())
    data["init_from"]["layers"] = [0, 1]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ProtocolError, match=r"init_from\.layers names 2 source layers for a model of 4"):
        load_recipe(tmp_path / "bad.yaml")


def test_the_continued_recipes_start_from_the_shipped_base():
    """bases/tiny-base-v2 and tiny-base-large-v2 name tiny-base by its recorded hash."""
    digest = (ROOT / "bases" / "tiny-base" / "SHA256").read_text().split()[0]
    for name in ("tiny-base-v2", "tiny-base-large-v2"):
        recipe = load_recipe(ROOT / "bases" / f"{name}.recipe.yaml")
        assert recipe.init_from.sha256 == digest
        assert (ROOT / "bases" / recipe.init_from.path / "model.safetensors").is_file()


SKILLS_RECIPE = ROOT / "bases" / "tiny-base-skills.recipe.yaml"


def test_the_skilled_recipe_teaches_each_skill_as_the_protocols_render_it():
    """Relay and pointer sentences, the reverse operation with and without its inverse table: one hop each, as the
    rule-chasing generator renders them; Tier-1 rows verbatim from the pool; general text with no answer line."""
    from arms.bases.corpus import heldout_skills, tier1_rows

    recipe = load_recipe(SKILLS_RECIPE)
    examples = [e for step in range(30) for e in synthetic_corpus(recipe, step)]
    assert {e.kind for e in examples} == {kind for kind, weight in recipe.mixture.items() if weight > 0}
    pool = {(row.prompt, " " + row.answer) for row in tier1_rows(recipe)}
    assert len(pool) == sum(4 * spec.per_op for spec in recipe.tier1_pool)
    for example in examples:
        if example.kind in ("relay", "pointer", "reverse_inverse", "reverse_forward"):
            assert example.depth == 1
            stated = re.findall(r"exactly (\d+) times?|After (\d+) days?", example.prompt)
            assert {n for pair in stated for n in pair if n} == {"1"}, example.prompt
        if example.kind == "reverse_inverse":
            assert "Inverse table:" in example.prompt
        if example.kind == "reverse_forward":
            assert "Inverse table:" not in example.prompt and "Find the value that f maps to" in example.prompt
        if example.kind == "tier1":
            assert (example.prompt, example.answer) in pool
        if example.kind == "text":
            assert "Answer:" not in example.text
    skills = heldout_skills(recipe)
    assert set(skills) == {"relay", "pointer", "reverse_inverse", "reverse_forward", "tier1"}
    trained = {e.prompt for e in examples}
    for kind in ("relay", "pointer", "reverse_inverse", "reverse_forward"):
        assert len(skills[kind]) == recipe.eval_rows
        # a one-hop sentence table holds two rules over 24 names (a small space the corpus may repeat); the
        # reverse tables permute 16 symbols: drawn from another stream, none is a trained one
        if kind.startswith("reverse"):
            assert not trained & {e.prompt for e, _ in skills[kind]}
        assert all(" " + e.answer.strip() in {" " + s for s in symbols} for e, symbols in skills[kind])
    # the one skill measured on the rows it was taught: what the base knows of its guardrail's rows
    assert {(e.prompt, e.answer) for e, _ in skills["tier1"]} == pool


def test_the_tier1_kind_needs_its_pool_and_the_skilled_base_continues_the_8_layer_one():
    import yaml

    from ledger.protocol.loader import ProtocolError

    data = yaml.safe_load(SKILLS_RECIPE.read_text())
    data["tier1_pool"] = []
    with pytest.raises((ProtocolError, ValueError), match="tier1_pool"):
        from arms.bases.recipe import PretrainRecipe

        PretrainRecipe.model_validate(data)
    recipe = load_recipe(SKILLS_RECIPE)
    source = (ROOT / "bases" / "tiny-base-large-v2" / "SHA256").read_text().split()[0]
    assert recipe.init_from.sha256 == source and recipe.init_from.path == "tiny-base-large-v2"


SKILLS_V2_RECIPE = ROOT / "bases" / "tiny-base-skills-v2.recipe.yaml"


def test_reverse_tables_grow_in_stages_and_ask_several_starts_each_answered_by_the_inverse():
    """tiny-base-skills-v2: reverse tables of the stage's sizes (a subset of N16), 3-6 questions each, every answer
    the symbol that f maps to the start; the held-out rows stay the protocols' N16 rendering, one question."""
    from arms.bases.corpus import heldout_skills, reverse_symbols_at

    recipe = load_recipe(SKILLS_V2_RECIPE)
    assert recipe.init_from.sha256 == (ROOT / "bases" / "tiny-base-skills" / "SHA256").read_text().split()[0]
    for step, (low, high) in ((0, (3, 8)), (1000, (4, 12)), (2000, (6, 16)), (2900, (12, 16))):
        assert reverse_symbols_at(recipe, step) == (low, high)
        examples = [
            e for at in range(step, step + 6) for e in synthetic_corpus(recipe, at) if e.kind.startswith("reverse")
        ]
        assert examples
        for example in examples:
            table = dict(re.findall(r"^([A-P]) -> ([A-P])$", example.prompt.split("Inverse table:")[0], re.M))
            assert low <= len(table) <= high and sorted(table.values()) == sorted(table)  # a permutation
            assert 2 <= len(example.followups) + 1 <= 6 and (example.kind == "reverse_inverse") == (
                "Inverse table:" in example.prompt
            )
            inverse = {value: key for key, value in table.items()}
            start = re.search(r"Start value: ([A-P])", example.prompt).group(1)
            assert example.answer == " " + inverse[start]
            for question, answer in example.followups:
                asked = re.search(r"Start value: ([A-P])", question).group(1)
                assert answer == " " + inverse[asked] and "exactly 1 times" in question
    held_out = heldout_skills(recipe)
    for kind in ("reverse_inverse", "reverse_forward"):
        assert all(len(re.findall(r"^[A-P] -> [A-P]$", e.prompt, re.M)) == 16 * (1 + (kind == "reverse_inverse"))
                   for e, _ in held_out[kind])  # fmt: skip
        assert all(not e.followups for e, _ in held_out[kind])


SKILLS_V3_RECIPE = ROOT / "bases" / "tiny-base-skills-v3.recipe.yaml"


def _sentence_rules(prompt: str) -> dict[str, str]:
    """The rules a relay or pointer prompt lists: giver -> receiver (a relay rule that keeps the key maps to itself)."""
    rules = dict(re.findall(r"^(\w+) always passes the key to (\w+)\.$", prompt, re.M))
    rules |= {name: name for name in re.findall(r"^(\w+) always keeps the key\.$", prompt, re.M)}
    return rules | dict(re.findall(r"^(\w+)'s note points to (\w+)\.$", prompt, re.M))


def test_sentence_lookups_give_every_name_a_rule_so_only_a_lookup_answers():
    """tiny-base-skills-v3: a relay or pointer lookup lists a rule for every name of its table (the stage's size), is
    answered by the start's rule, and its follow-up starts and recalled lines by theirs; held out, every one of the
    24 names has a rule. The kinds without distractors list two rules, the answer the only name besides the start."""
    from arms.bases.corpus import heldout_skills

    recipe = load_recipe(SKILLS_V3_RECIPE)
    assert recipe.init_from.sha256 == (ROOT / "bases" / "tiny-base-skills-v2" / "SHA256").read_text().split()[0]
    for step, sizes in ((0, {4}), (1200, {4, 8}), (2500, {4, 8, 16, 24})):
        examples = [
            e for at in range(step, step + 4) for e in synthetic_corpus(recipe, at) if e.kind.endswith("_lookup")
        ]
        assert {e.kind for e in examples} == {"relay_lookup", "pointer_lookup"}
        for example in examples:
            rules = _sentence_rules(example.prompt)
            names_in_table = set(re.findall(r"^(\w+)(?: always|'s note)", example.prompt, re.M))
            assert set(rules) == names_in_table and len(rules) in sizes  # the stage's sizes: a rule for every name
            start = re.search(r"(\w+) has the key on day 0|Start at (\w+)'s note", example.prompt).group(1, 2)
            assert example.answer == " " + rules[next(name for name in start if name)]
            for question, answer in example.followups:
                asked = re.search(r"^(\w+)(?: has the key on day 0| always passes the key to$|'s note points to$)|"
                                  r"Start at (\w+)'s note", question).group(1, 2)  # fmt: skip
                assert answer == " " + rules[next(name for name in asked if name)]
    held_out = heldout_skills(recipe)
    for kind in ("relay_lookup", "pointer_lookup"):
        assert all(len(_sentence_rules(e.prompt)) == 24 and not e.followups for e, _ in held_out[kind])
    for kind in ("relay", "pointer"):
        for example, _ in held_out[kind]:
            start = re.search(r"(\w+) has the key on day 0|Start at (\w+)'s note", example.prompt).group(1, 2)
            assert set(_sentence_rules(example.prompt)) - set(start) == {example.answer.strip()}
