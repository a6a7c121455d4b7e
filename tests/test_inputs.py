"""parse_json: every way a named file's text can fail to be usable JSON is one line naming the file."""

from __future__ import annotations

import pytest

from ledger.inputs import InputFileError, parse_json


def test_valid_json_parses():
    assert parse_json('{"a": [1, 2.5, "x"]}', "f.json") == {"a": [1, 2.5, "x"]}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not valid JSON (Expecting property name enclosed in double quotes, line 1)"),
        ("[1,\n2,\n", "not valid JSON (Expecting value, line 3)"),
        ("[" * 200_000 + "]" * 200_000, "not usable JSON (nested too deeply)"),
        ("9" * 100_000, "not usable JSON (Exceeds the limit"),
    ],
)
def test_unusable_json_is_one_line_naming_the_file(text, reason):
    with pytest.raises(InputFileError) as caught:
        parse_json(text, "dir/f.json:7")
    message = str(caught.value)
    assert message.startswith(f"dir/f.json:7: {reason}"), message
    assert "\n" not in message
