"""One visible name, one thing: a name that becomes a key is stored in NFC, and one a reader cannot tell apart
from another (an invisible character, letters of two scripts, a compatibility form) is refused with one located
line. Every case below was accepted before (issue 52): e.g. two claim families the multiplicity correction
treated apart under one visible name."""

from __future__ import annotations

import shutil
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_core import PydanticCustomError

from ledger.audit.release import ReleaseMapping
from ledger.cli.main import main
from ledger.protocol.claims import ClaimFile
from ledger.protocol.loader import ProtocolError, parse_model_text, parse_protocol
from ledger.protocol.names import key_name, name_problem

ROOT = Path(__file__).resolve().parents[2]
SMOKE = (ROOT / "protocols" / "smoke.yaml").read_text(encoding="utf-8")

ZERO_WIDTH_SPACE = "\u200b"
GREEK_OMICRON = "\u03bf"  # looks like Latin 'o'
CYRILLIC_A = "\u0430"  # looks like Latin 'a'
CAFE_NFC = "caf\u00e9"
CAFE_NFD = "cafe\u0301"  # 'e' + COMBINING ACUTE ACCENT: the same visible name, other code points


def _replace(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


def _one_issue(text: str, model=None, what: str = "claim file"):
    """The single issue a document is refused with (the file is named "f.yaml")."""
    with pytest.raises(ProtocolError) as info:
        if model is None:
            parse_protocol(text, "f.yaml")
        else:
            parse_model_text(text, "f.yaml", model, what)
    issues = info.value.issues
    assert len(issues) == 1, [str(issue) for issue in issues]
    return issues[0]


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (f"primary{ZERO_WIDTH_SPACE}", "U+200B ZERO WIDTH SPACE"),
        ("pri\u200dmary", "U+200D ZERO WIDTH JOINER"),
        ("arm\u202eA", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("\ufeffarm", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
        ("arm\ufe0f", "U+FE0F VARIATION SELECTOR-16"),
        ("arm\u034fA", "U+034F COMBINING GRAPHEME JOINER"),
        ("arm\u3164", "U+3164 HANGUL FILLER"),
        ("arm\ue000", "private-use"),
        ("arm\tA", "control character"),
        ("two\u00a0words", "U+00A0 NO-BREAK SPACE, a space a reader cannot tell from U+0020"),
        ("two\u3000words", "U+3000 IDEOGRAPHIC SPACE"),
        ("line\u2028break", "U+2028 LINE SEPARATOR"),
        (f"base_m{GREEK_OMICRON}del", "mixes the Latin and Greek scripts (U+03BF GREEK SMALL LETTER OMICRON"),
        (f"f{CYRILLIC_A}mily", "mixes the Latin and Cyrillic scripts (U+0430 CYRILLIC SMALL LETTER A"),
        ("arm\u4e00one", "mixes the Latin and Han scripts"),  # U+4E00 (one) reads as a dash
        ("arm_\u0663", "mixes the Latin and Arabic scripts"),  # an Arabic-Indic three among Latin letters
        ("\ufb01nal", "U+FB01 LATIN SMALL LIGATURE FI, a compatibility form of 'fi'"),
        ("\uff41rm", "FULLWIDTH LATIN SMALL LETTER A"),
        (" primary", "begins or ends with whitespace"),
        ("primary ", "begins or ends with whitespace"),
        ("", "cannot be empty"),
    ],
)
def test_a_name_a_reader_cannot_tell_apart_is_refused(name, reason):
    problem = name_problem(unicodedata.normalize("NFC", name))
    assert problem is not None and reason in problem, problem


@pytest.mark.parametrize(
    "name",
    [
        "primary",
        "base:tiny",
        "two words",
        CAFE_NFC,
        "\u0441\u0435\u043c\u044c\u044f",  # Cyrillic alone
        "\u03bf\u03b9\u03ba\u03bf\u03b3\u03ad\u03bd\u03b5\u03b9\u03b1",  # Greek alone
        "\u4e3b\u8981\u306a\u6bd4\u8f03",  # Japanese: Han and Hiragana, one name to its reader
        "\u30c6\u30b9\u30c8\u30fc",  # Katakana with its prolonged sound mark
        "\ud55c\uad6d\uc5b4_2",  # Hangul with an ASCII digit
    ],
)
def test_an_ordinary_name_in_one_script_is_accepted(name):
    assert name_problem(name) is None


def test_a_name_is_stored_in_nfc():
    assert CAFE_NFD != CAFE_NFC
    assert key_name(CAFE_NFD) == key_name(CAFE_NFC) == CAFE_NFC


@given(st.text(max_size=12))
def test_an_accepted_name_is_nfc_and_accepted_again_as_itself(text):
    try:
        stored = key_name(text)
    except PydanticCustomError as exc:  # a refusal: its reason is one line, whatever the name holds
        assert len(str(exc).splitlines()) == 1, str(exc)
        return
    assert stored == unicodedata.normalize("NFC", text) and key_name(stored) == stored


# ----------------------------------------------------------------------------- claim files

CLAIMS = """\
protocol: smoke
correction: holm
{families}claims:
  - {{id: first, statement: A beats B., statistic: paired_exact, arms: [A, B], manifest: eval, family: "{one}"}}
  - {{id: second, statement: A beats C., statistic: paired_exact, arms: [A, C], manifest: eval, family: "{two}"}}
"""


def _claims(one: str, two: str, families: str = "") -> str:
    return CLAIMS.format(one=one, two=two, families=families)


def test_two_families_under_one_visible_name_are_refused():
    """The measured case: "primary" and "primary" + U+200B were two families, each corrected on its own."""
    issue = _one_issue(_claims("primary", f"primary{ZERO_WIDTH_SPACE}"), ClaimFile)
    assert issue.path == "claims.1.family" and issue.line == 5
    assert "holds an invisible character, U+200B ZERO WIDTH SPACE" in issue.message


def test_a_family_mixing_scripts_is_refused():
    issue = _one_issue(_claims("primary", f"prim{CYRILLIC_A}ry"), ClaimFile)
    assert issue.path == "claims.1.family" and "mixes the Latin and Cyrillic scripts" in issue.message


def test_two_spellings_of_one_family_are_one_family():
    declared = f"families:\n  {CAFE_NFD}: {{correction: bonferroni, members: [first, second]}}\n"
    claims = parse_model_text(_claims(CAFE_NFC, CAFE_NFD, declared), "f.yaml", ClaimFile, "claim file")
    assert claims.claims[0].family == claims.claims[1].family == CAFE_NFC
    assert list(claims.families) == [CAFE_NFC]


def test_a_family_in_another_script_is_accepted():
    family = "\u4e3b\u8981\u306a\u6bd4\u8f03"
    claims = parse_model_text(_claims(family, family), "f.yaml", ClaimFile, "claim file")
    assert {claim.family for claim in claims.claims} == {family}


def test_declared_families_written_two_ways_are_refused():
    declared = (
        f"families:\n  {CAFE_NFC}: {{correction: holm, members: [first, second]}}\n"
        f"  {CAFE_NFD}: {{correction: bonferroni, members: [first, second]}}\n"
    )
    issue = _one_issue(_claims(CAFE_NFC, CAFE_NFC, declared), ClaimFile)
    assert issue.path == f"families.{CAFE_NFD}" and issue.line == 5
    assert "keys 'caf\\xe9' and 'cafe\\u0301' are one name written two ways" in issue.message


@pytest.mark.parametrize(
    ("requires", "path"),
    [
        (f"[fir{ZERO_WIDTH_SPACE}st]", "claims.1.requires.0"),  # another claim, by id
        (f"[{{gate: instal{CYRILLIC_A}tion, arm: A}}]", "claims.1.requires.0.gate"),  # a gate that must have passed
    ],
)
def test_a_look_alike_precondition_is_one_located_line(requires, path):
    """One line, not one per member of the union (claim id or gate) that the precondition could have been."""
    text = (
        "protocol: smoke\ncorrection: holm\nclaims:\n"
        "  - {id: first, statement: A beats B., statistic: paired_exact, arms: [A, B], manifest: eval}\n"
        f"  - {{id: second, statement: A beats C., statistic: paired_exact, arms: [A, C], manifest: eval, "
        f"requires: {requires}}}\n"
    )
    issue = _one_issue(text, ClaimFile)
    assert issue.path == path and issue.line == 5, issue
    assert "invisible character" in issue.message or "Cyrillic" in issue.message


def test_a_look_alike_gate_reference_in_a_claim_is_refused():
    """The gate's id has an ASCII pattern; a claim's reference to it had none, so a look-alike was "unknown"."""
    text = (
        "protocol: smoke\ncorrection: holm\nclaims:\n"
        f"  - {{id: g, statement: s., statistic: gate, gate: install{CYRILLIC_A}tion, arm: A, manifest: dev}}\n"
    )
    issue = _one_issue(text, ClaimFile)
    # the statistic's tag "gate" is not read as the field of that name (once the path was claims.0.gate.gate)
    assert issue.path == "claims.0.gate" and issue.line == 4 and "Cyrillic" in issue.message


def test_check_prints_one_line_for_a_look_alike_name_in_a_claim_file(tmp_path, capsys):
    (tmp_path / "protocols").mkdir()
    (tmp_path / "claims").mkdir()
    shutil.copy(ROOT / "protocols" / "smoke.yaml", tmp_path / "protocols" / "smoke.yaml")
    claims = (ROOT / "claims" / "smoke.yaml").read_text(encoding="utf-8")
    claims = _replace(claims, "gate: installation, arm: A", f"gate: installation{ZERO_WIDTH_SPACE}, arm: A")
    (tmp_path / "claims" / "smoke.yaml").write_text(claims, encoding="utf-8")
    assert main(["check", str(tmp_path / "protocols" / "smoke.yaml")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert ": claims.0.gate" in lines[0] and "'installation\\u200b' holds an invisible character" in lines[0], lines[0]
    assert lines[0].split(":")[1].isdigit(), lines[0]


# ----------------------------------------------------------------------------- protocols


def test_a_base_name_with_a_greek_omicron_is_refused_on_its_line():
    name = f"tiny_m{GREEK_OMICRON}del"
    text = _replace(SMOKE, "bases:\n  tiny:\n", f"bases:\n  {name}:\n")
    issue = _one_issue(text)
    assert issue.path == f"bases.{name}" and "mixes the Latin and Greek scripts" in issue.message
    assert text.splitlines()[issue.line - 1].strip() == f"{name}:"


def test_a_look_alike_reference_to_a_base_names_the_reason_not_an_unknown_base():
    text = _replace(SMOKE, "base: tiny\n", f"base: tiny{ZERO_WIDTH_SPACE}\n")
    issue = _one_issue(text)
    assert issue.path == "arms.0.base" and "U+200B ZERO WIDTH SPACE" in issue.message


def test_a_look_alike_gate_reference_in_a_stage_is_refused():
    text = _replace(SMOKE, "gates: [installation, tier1]", f"gates: [install{CYRILLIC_A}tion, tier1]")
    issue = _one_issue(text)
    assert issue.path == "arms.0.stages.0.gates.0" and "Cyrillic" in issue.message


def test_a_base_name_written_two_ways_is_one_base_and_one_protocol():
    nfc = parse_protocol(SMOKE.replace("tiny:\n", f"{CAFE_NFC}:\n").replace("base: tiny\n", f"base: {CAFE_NFC}\n"))
    mixed = SMOKE.replace("tiny:\n", f"{CAFE_NFD}:\n").replace("base: tiny\n", f"base: {CAFE_NFC}\n", 2)
    mixed = mixed.replace("base: tiny\n", f"base: {CAFE_NFD}\n")
    protocol = parse_protocol(mixed)
    assert list(protocol.bases) == [CAFE_NFC] and {arm.base for arm in protocol.arms} == {CAFE_NFC}
    assert protocol.sha256 == nfc.sha256  # two spellings, one preregistration


def test_two_bases_under_one_visible_name_are_refused():
    block = SMOKE.split("bases:\n", 1)[1].split("manifests:", 1)[0]  # the one base's block
    text = _replace(
        SMOKE,
        "bases:\n" + block,
        "bases:\n" + block.replace("tiny:", f"{CAFE_NFC}:", 1) + block.replace("tiny:", f"{CAFE_NFD}:", 1),
    )
    issue = _one_issue(text)
    assert "one name written two ways" in issue.message and issue.path == f"bases.{CAFE_NFD}"


def test_a_look_alike_mixture_key_is_refused():
    text = _replace(
        SMOKE,
        "manifest: train, steps: 6, batch_size: 8, optimizer: {kind: adamw, lr: 0.003}, recurrence",
        f"mixture: {{tr{CYRILLIC_A}in: 1.0}}, steps: 6, batch_size: 8, optimizer: {{kind: adamw, lr: 0.003}}, recurrence",
    )
    issue = _one_issue(text)
    assert issue.path == f"arms.0.stages.0.mixture.tr{CYRILLIC_A}in" and "Cyrillic" in issue.message


# ----------------------------------------------------------------------------- release mappings

MAPPING = """\
release: look_alike
source: a test
root: data
manifests:
  - {id: phaseA, file: rows.jsonl, fields: {answer: target}}
predictions:
  - {arm: A, manifest: "phase\u200dA", file: arm_A.jsonl, prediction: prediction}
"""


def test_a_look_alike_manifest_reference_in_a_release_mapping_is_refused():
    issue = _one_issue(MAPPING, ReleaseMapping, "release mapping")
    assert issue.path == "predictions.0.manifest" and "U+200D ZERO WIDTH JOINER" in issue.message
