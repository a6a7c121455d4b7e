"""Task generators: the paper's exact rendering, row invariants, seeds, alphabets, arithmetic."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.canonical import canonical_json
from ledger.rows.manifest import Manifest
from ledger.rows.tasks import GENERATORS, generate, generate_manifest
from ledger.rows.tasks.alphabets import ALPHABETS, N16, N24, NAMES, resolve_alphabet
from ledger.rows.tasks.arithmetic import LABELS, check_arithmetic_row, generate_arithmetic
from ledger.rows.tasks.rule_chasing import (
    chase,
    check_rule_chasing_row,
    generate_rule_chasing,
    make_table,
    row_id,
)
from ledger.rows.tasks.seeds import derive_seed, row_rng
from ledger.rows.tasks.surfaces import render, render_pointer, render_relay, render_symbolic

ROOT = Path(__file__).resolve().parents[2]
FROZEN = Path("recurrent-qwen-svgd") / "phase_a" / "frozen_rows.jsonl"


def _reference_file(relative: Path) -> Path | None:
    candidates = [
        os.environ.get("LEDGER_REFERENCE_DIR"),
        ROOT / "shared" / "reference",
        ROOT.parent / "shared" / "reference",
    ]
    for base in candidates:
        if base and (Path(base) / relative).is_file():
            return Path(base) / relative
    return None


@pytest.fixture(scope="module")
def paper_rows() -> list[dict]:
    path = _reference_file(FROZEN)
    if path is None:
        pytest.fail(
            "released frozen rows not found: lay ../shared/reference beside the checkout (or set LEDGER_REFERENCE_DIR);"
            " a test that needs them fails when they are absent, it does not skip",
            pytrace=False,
        )
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    assert len(rows) == 1792
    return rows


def _question_order(question: str) -> list[str]:
    """The display order of the table in a released question (left-hand sides only)."""
    body = question.split("Function table:\n", 1)[1].split("\n\nStart value:", 1)[0]
    return [line.split(" -> ", 1)[0] for line in body.split("\n")]


# --------------------------------------------------------------------------- paper rows


def test_symbolic_surface_reproduces_every_released_question_byte_for_byte(paper_rows):
    mismatches = []
    for row in paper_rows:
        order = _question_order(row["question"])
        text = render_symbolic(row["mapping"], row["start"], row["depth"], order)
        if text != row["question"]:
            mismatches.append(row["id"])
        # the same through the dispatcher, with the table itself in display order
        assert render("symbolic", {k: row["mapping"][k] for k in order}, row["start"], row["depth"]) == text
    assert mismatches == []


def test_released_rows_have_distinct_orbits_consistent_with_their_tables(paper_rows):
    per_depth = Counter()
    for row in paper_rows:
        depth, mapping, orbit = row["depth"], row["mapping"], row["orbit"]
        assert row["n_symbols"] == 16 and sorted(mapping) == list(N16)
        assert set(mapping.values()) <= set(N16)
        assert len(orbit) == depth + 1 and len(set(orbit)) == depth + 1
        assert orbit[0] == row["start"]
        assert chase(mapping, row["start"], depth) == orbit
        assert orbit[-1] == row["target"] == row["choices"][row["answer"]]
        # ids: {split}_d{depth:02d}_{index:05d}, the index counting within the depth
        assert row["id"] == row_id("test", depth, per_depth[depth])
        per_depth[depth] += 1
    assert per_depth == dict.fromkeys(range(1, 15), 128)


def _rest_of_table_stats(rows) -> dict:
    """How the non-orbit part of the table behaves: counts and their expectations if
    every such rule maps to a uniformly random symbol of the alphabet."""
    last_on_orbit = last_expected = last_var = 0.0
    last_to_start = 0
    off_on_orbit = off_expected = off_total = 0.0
    for depth, mapping, orbit in rows:
        n = len(mapping)
        p = (depth + 1) / n
        last_on_orbit += mapping[orbit[-1]] in orbit
        last_to_start += mapping[orbit[-1]] == orbit[0]
        last_expected += p
        last_var += p * (1 - p)
        for key, value in mapping.items():
            if key not in orbit:
                off_total += 1
                off_on_orbit += value in orbit
                off_expected += p
    return {
        "last_z": (last_on_orbit - last_expected) / math.sqrt(last_var),
        "last_to_start": last_to_start,
        "off_on_orbit": off_on_orbit,
        "off_ratio": off_on_orbit / off_expected,
        "off_total": off_total,
    }


def test_rest_of_table_matches_uniform_random_rules_in_paper_and_generator(paper_rows):
    """The understanding behind make_table: in the released rows the last orbit symbol
    maps to a uniformly random symbol (back onto the orbit, its start included, at the
    rate (d+1)/16), and off-orbit symbols map anywhere, the orbit included. Our
    generator, on the same depths and alphabet, shows the same statistics."""
    paper = _rest_of_table_stats((r["depth"], r["mapping"], r["orbit"]) for r in paper_rows)
    ours_rows = generate_rule_chasing(
        surface="symbolic", symbols="N16", depth_range=(1, 14), rows_per_depth=128, seed=7, split="test"
    )
    ours = _rest_of_table_stats((r.depth, r.table, r.path) for r in ours_rows)
    for stats in (paper, ours):
        assert abs(stats["last_z"]) < 4
        assert stats["last_to_start"] > 0  # the last symbol may close a cycle through the start
        assert stats["off_on_orbit"] > 0  # distractor rules may point into the orbit
        assert 0.9 < stats["off_ratio"] < 1.1


# --------------------------------------------------------------------------- generator invariants


def _assert_invariants(row, alphabet) -> None:
    depth, table, path = row.depth, row.table, row.path
    assert row.task == "rule_chasing"
    assert row.symbols == list(alphabet)
    assert len(path) == depth + 1 and len(set(path)) == depth + 1
    assert path[0] == row.start
    assert all(table[path[t]] == path[t + 1] for t in range(depth))
    assert row.answer == path[-1] == path[depth]
    # every symbol a key exactly once, and shown once in the display order
    assert sorted(table) == sorted(alphabet) and Counter(row.meta["order"]) == Counter(alphabet)
    assert set(table.values()) <= set(alphabet)
    assert row.answer in row.symbols
    check_rule_chasing_row(row)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=-(2**63), max_value=2**63), split=st.sampled_from(["test", "train", "val"]))
def test_generated_rows_satisfy_invariants_n24(seed, split):
    rows = generate_rule_chasing(
        surface="symbolic", symbols="N24", depth_range=(1, 23), rows_per_depth=2, seed=seed, split=split
    )
    assert [r.depth for r in rows] == [d for d in range(1, 24) for _ in range(2)]
    for row in rows:
        _assert_invariants(row, N24)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**64), surface=st.sampled_from(["symbolic", "relay", "pointer"]))
def test_generated_rows_satisfy_invariants_n16(seed, surface):
    rows = generate_rule_chasing(
        surface=surface, symbols="N16", depth_range=(1, 15), rows_per_depth=2, seed=seed, split="test"
    )
    for row in rows:
        _assert_invariants(row, N16)
        assert row.surface == surface


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32), depth=st.integers(min_value=1, max_value=23))
def test_make_table_orbit_and_closed_table_without_distractors(seed, depth):
    import random

    table, start, path = make_table(random.Random(seed), N24, depth)
    assert path[0] == start and len(set(path)) == depth + 1 and chase(table, start, depth) == path
    table, start, path = make_table(random.Random(seed), N24, depth, distractors=False)
    assert set(table) == set(path)  # only the orbit's rules
    assert table[path[-1]] in path  # closed: no key stands out as "the end"
    assert chase(table, start, depth) == path


def test_row_ids_meta_and_order():
    rows = generate_rule_chasing(surface="symbolic", depth_range=(11, 12), rows_per_depth=3, seed=5, split="test")
    assert [r.row_id for r in rows] == [
        "test_d11_00000",
        "test_d11_00001",
        "test_d11_00002",
        "test_d12_00000",
        "test_d12_00001",
        "test_d12_00002",
    ]
    row = rows[4]
    assert row.symbols == list(N16)  # symbolic defaults to N16
    assert {k: row.meta[k] for k in ("generator", "version", "seed", "split", "index")} == {
        "generator": "rule_chasing",
        "version": 1,
        "seed": 5,
        "split": "test",
        "index": 1,
    }
    assert row.meta["order"] == list(row.table)
    assert not row.prompt.endswith("Answer:")


def test_prompt_rerenders_after_jsonl_round_trip(tmp_path):
    for surface in ("symbolic", "relay", "pointer"):
        manifest = generate_manifest(
            "m", "rule_chasing", surface=surface, depth_range=(1, 6), rows_per_depth=4, seed=3, split="test"
        )
        back = Manifest.read_jsonl(manifest.write_jsonl(tmp_path / f"{surface}.jsonl"))
        assert back.sha256 == manifest.sha256
        for row in back.rows:
            # canonical JSON sorts the table; the display order survives in meta.order
            assert render(surface, row.table, row.start, row.depth, row.meta["order"]) == row.prompt
            check_rule_chasing_row(row)


def test_alphabet_too_small_is_a_clear_error():
    import random

    with pytest.raises(ValueError, match=r"depth 16 needs an orbit of 17 distinct symbols.*only 16"):
        make_table(random.Random(0), "N16", 16)
    with pytest.raises(ValueError, match=r"max depth 24 needs 25 distinct symbols but the alphabet has 24"):
        generate_rule_chasing(surface="relay", depth_range=(1, 24), rows_per_depth=1, seed=0, split="test")
    with pytest.raises(ValueError, match="alphabet has 3"):
        generate_rule_chasing(
            surface="symbolic", symbols=["x", "y", "z"], depth_range=(1, 3), rows_per_depth=1, seed=0, split="test"
        )
    # the boundary itself works
    assert (
        len(
            generate_rule_chasing(
                surface="symbolic", symbols="N16", depth_range=(15, 15), rows_per_depth=1, seed=0, split="t"
            )
        )
        == 1
    )


@pytest.mark.parametrize(
    "params, message",
    [
        ({"depth_range": (0, 3)}, "depth must be an int >= 1"),
        ({"depth_range": (5, 3)}, "is empty"),
        ({"depth_range": (1, 2, 3)}, "min_depth, max_depth"),
        ({"rows_per_depth": 0}, "rows_per_depth"),
        ({"surface": "poem"}, "unknown surface"),
        ({"version": 2}, "not supported"),
        ({"split": "my split"}, "split"),
        ({"symbols": "N99"}, "unknown alphabet 'N99'"),
    ],
)
def test_generator_parameter_errors(params, message):
    base = {"surface": "symbolic", "depth_range": (1, 3), "rows_per_depth": 1, "seed": 0, "split": "test"}
    with pytest.raises(ValueError, match=message):
        generate_rule_chasing(**{**base, **params})


# --------------------------------------------------------------------------- seeds


def test_derive_seed_is_the_first_8_bytes_of_sha256_of_canonical_coordinates():
    coords = ["rule_chasing", 1, 123, "test", 12, 91]
    digest = hashlib.sha256(canonical_json(coords).encode("utf-8")).digest()
    assert derive_seed(*coords) == int.from_bytes(digest[:8], "big")
    assert 0 <= derive_seed(*coords) < 2**64
    assert row_rng(*coords).random() == row_rng(*coords).random()


def test_derive_seed_has_no_additive_neighbours():
    """The published code's seed + offset scheme aliased neighbours; hashing does not."""
    seeds = {}
    for seed in range(3):
        for depth in range(1, 4):
            for index in range(3):
                for split in ("test", "train"):
                    seeds[(seed, depth, index, split)] = derive_seed("rule_chasing", 1, seed, split, depth, index)
    assert len(set(seeds.values())) == len(seeds)
    # what an additive scheme gets wrong: (seed=1, index=0) vs (seed=0, index=1)
    assert derive_seed("g", 1, 1, "test", 1, 0) != derive_seed("g", 1, 0, "test", 1, 1)


@pytest.mark.parametrize("bad", [True, "1", 1.0, None])
def test_derive_seed_rejects_non_int_seeds(bad):
    with pytest.raises(TypeError):
        derive_seed("rule_chasing", 1, bad, "test", 1, 0)


def test_adjacent_datasets_share_no_row():
    """14 depths x 128 rows: seed neighbours, split neighbours, and depth/index neighbours
    inside one dataset pose different problems."""
    params = {"surface": "symbolic", "symbols": "N16", "depth_range": (1, 14), "rows_per_depth": 128}
    base = generate_rule_chasing(seed=1000, split="test", **params)
    keys = [r.table_key() for r in base]
    assert len(set(keys)) == len(keys) == 1792  # no two (depth, index) cells coincide
    assert len({r.prompt for r in base}) == 1792
    for other in (
        generate_rule_chasing(seed=1001, split="test", **params),
        generate_rule_chasing(seed=999, split="test", **params),
        generate_rule_chasing(seed=1000, split="train", **params),
    ):
        assert not set(keys) & {r.table_key() for r in other}
        assert not {r.sha256 for r in base} & {r.sha256 for r in other}
        assert not {r.prompt for r in base} & {r.prompt for r in other}


# --------------------------------------------------------------------------- alphabets and surfaces


def test_alphabets():
    assert "".join(N16) == "ABCDEFGHIJKLMNOP"
    assert "".join(N24) == "ABCDEFGHIJKLMNOPQRSTUVWX"
    assert len(NAMES) >= 24 and len(set(NAMES)) == len(NAMES)
    assert all(re.fullmatch(r"[A-Z][a-z]{2,4}", name) for name in NAMES)
    # no name is a prefix of another (a first-token reader cannot confuse two names)
    assert not [(a, b) for a in NAMES for b in NAMES if a != b and b.startswith(a)]
    for name, alphabet in ALPHABETS.items():
        assert resolve_alphabet(name) == alphabet
    assert resolve_alphabet(["x", "y"]) == ("x", "y")
    with pytest.raises(ValueError, match=r"unknown alphabet 'N32'.*N16"):
        resolve_alphabet("N32")
    with pytest.raises(ValueError, match="duplicate symbols: 'A'"):
        resolve_alphabet(["A", "B", "A"])
    with pytest.raises(ValueError):
        resolve_alphabet([])
    with pytest.raises(ValueError, match="whitespace"):
        resolve_alphabet(["A", " B"])


def test_natural_surfaces_wording():
    table = {"Ben": "Max", "Max": "Eve", "Eve": "Eve"}
    relay1 = render_relay(table, "Ben", 1)
    assert "Ben always passes the key to Max.\n" in relay1
    assert "Eve always keeps the key." in relay1
    assert relay1.endswith("After 1 day, who has the key?")
    assert "Ben has the key on day 0." in relay1
    assert render_relay(table, "Ben", 2).endswith("After 2 days, who has the key?")
    pointer1 = render_pointer(table, "Ben", 1)
    assert "Ben's note points to Max.\n" in pointer1
    assert "Start at Ben's note and follow the notes exactly 1 time.\n" in pointer1
    assert render_pointer(table, "Ben", 3).endswith("exactly 3 times.\nWhose note do you reach?")
    # display order is the table's order unless given
    assert render_pointer(table, "Ben", 1, ["Eve", "Max", "Ben"]).index("Eve's") < render_pointer(
        table, "Ben", 1
    ).index("Eve's")
    with pytest.raises(ValueError, match="every key"):
        render_relay(table, "Ben", 1, ["Ben"])
    with pytest.raises(ValueError, match="no rule"):
        render_pointer(table, "Zed", 1)


@pytest.mark.parametrize("surface", ["relay", "pointer"])
def test_natural_surfaces_default_to_names_and_work_with_letters(surface):
    rows = generate_rule_chasing(surface=surface, depth_range=(1, 23), rows_per_depth=1, seed=0, split="test")
    assert rows[0].symbols == list(NAMES)
    for row in rows:
        _assert_invariants(row, NAMES)
        assert all(name in row.prompt for name in NAMES)
    letters = generate_rule_chasing(
        surface=surface, symbols="N16", depth_range=(1, 3), rows_per_depth=2, seed=0, split="test"
    )
    for row in letters:
        _assert_invariants(row, N16)
    plain = generate_rule_chasing(
        surface=surface, depth_range=(1, 8), rows_per_depth=4, seed=0, split="test", distractors=False
    )
    for row in plain:
        assert set(row.table) == set(row.path)
        check_rule_chasing_row(row)


# --------------------------------------------------------------------------- arithmetic


def test_arithmetic_guardrail_rows():
    rows = generate_arithmetic(seed=11)
    assert len(rows) == 64
    assert Counter(r.meta["op"] for r in rows) == {"+": 16, "-": 16, "x": 16, "/": 16}
    assert len({r.row_id for r in rows}) == 64
    assert len({r.prompt for r in rows}) == 64
    for op in ("+", "-", "x", "/"):  # correct labels balanced within each op
        assert Counter(r.answer for r in rows if r.meta["op"] == op) == dict.fromkeys(LABELS, 4)
    for row in rows:
        assert row.task == "arithmetic" and row.surface == "multiple_choice" and row.depth == 0
        assert row.symbols == list(LABELS) and row.path == [row.answer]
        lines = row.prompt.split("\n")
        match = re.fullmatch(r"What is (\d+) ([-+*/]) (\d+)\?", lines[0])
        assert match, lines[0]
        a, sign, b = int(match[1]), match[2], int(match[3])
        assert a <= 144 and b <= 99
        value = eval(f"{a} {sign} {b}")
        assert value == int(value) and value >= 0
        assert lines[1:5] == [f"{label}. {row.choices[label]}" for label in LABELS]
        assert lines[5] == "Answer with the letter of the correct option."
        assert [label for label in LABELS if int(row.choices[label]) == value] == [row.answer]
        assert len(set(row.choices.values())) == 4
        assert all(int(v) >= 0 and abs(int(v) - value) <= max(10, a, b) for v in row.choices.values())
        check_arithmetic_row(row)
    assert generate_arithmetic(seed=11) == rows
    assert not {r.prompt for r in generate_arithmetic(seed=12)} >= {r.prompt for r in rows}


def test_arithmetic_options():
    assert len(generate_arithmetic(seed=0, per_op=5, split="probe")) == 20
    assert generate_arithmetic(seed=0)[0].row_id == "tier1_add_00000"
    with pytest.raises(ValueError, match="per_op"):
        generate_arithmetic(seed=0, per_op=0)
    # x and / have 121 distinct questions each: the most there is, and one more is refused (it used to loop forever)
    most = generate_arithmetic(seed=0, per_op=121, split="most")
    assert len({r.prompt.splitlines()[0] for r in most if r.meta["op"] == "x"}) == 121
    with pytest.raises(ValueError, match=r"per_op must be an int in 1\.\.121"):
        generate_arithmetic(seed=0, per_op=122)


def test_a_protocol_asking_more_arithmetic_rows_than_exist_is_refused():
    from ledger.protocol.manifests import ArithmeticManifest

    with pytest.raises(ValueError, match="less than or equal to 121"):
        ArithmeticManifest(id="t", role="guardrail", generator="arithmetic", seed=1, split="t", per_op=122)


# --------------------------------------------------------------------------- registry


def test_registry_dispatch():
    assert set(GENERATORS.names()) == {
        "rule_chasing",
        "arithmetic",
        "choice_file",
        "text",
        "word_problems",
        "token_corpus",
    }
    direct = generate_rule_chasing(surface="pointer", depth_range=(1, 2), rows_per_depth=2, seed=4, split="test")
    assert (
        generate("rule_chasing", surface="pointer", depth_range=[1, 2], rows_per_depth=2, seed=4, split="test")
        == direct
    )
    assert generate("arithmetic", seed=1) == generate_arithmetic(seed=1)
    assert (
        generate_manifest("tier1", "arithmetic", seed=1).sha256
        == Manifest(name="x", rows=tuple(generate_arithmetic(seed=1))).sha256
    )
    with pytest.raises(ValueError, match="unknown task generator 'chess'"):
        generate("chess", seed=0)
    with pytest.raises(TypeError, match="arithmetic"):
        generate("arithmetic", seed=0, depth_range=(1, 2))
