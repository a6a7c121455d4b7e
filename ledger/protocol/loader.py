"""Load a protocol file with errors a person can act on: file, YAML line, field path, reason.

YAML is parsed once into a node tree (for line numbers) and once into data; Pydantic's
errors are mapped back onto the nodes. Every failure, from an unreadable file to a
dangling reference, becomes a ``ProtocolError`` holding ``ProtocolIssue`` items; no
other exception escapes ``load_protocol``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ledger.inputs import MAX_DOCUMENT_BYTES, MAX_STRING_CHARS, InputFileError, read_text
from ledger.protocol.protocol import Protocol


@dataclass(frozen=True)
class ProtocolIssue:
    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        field = f" {self.path}:" if self.path else ""
        return f"{where}:{field} {self.message}"


class ProtocolError(Exception):
    """A protocol file that cannot be used; ``issues`` says where and why."""

    def __init__(self, issues: list[ProtocolIssue]):
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


class _Document:
    """YAML data plus a way to find the line of any path in it."""

    def __init__(self, text: str, file: str):
        self.file = file
        loader = yaml.SafeLoader(text)
        try:
            self.root = loader.get_single_node()
            if self.root is None:
                raise ProtocolError([ProtocolIssue(file, None, "", "the file is empty (expected a protocol mapping)")])
            _reject_duplicate_keys(self.root, file)
            self.data = loader.construct_document(self.root)
        finally:
            loader.dispose()

    def line_of(self, path: tuple[Any, ...]) -> int | None:
        """1-based line of the deepest node along ``path`` (the key's line for a mapping key)."""
        node = self.root
        assert node is not None  # an empty document is refused before any line is asked for
        line = node.start_mark.line + 1
        for element in path:
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.value == str(element):
                        line, node = key_node.start_mark.line + 1, value_node
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(element, int) and element < len(node.value):
                node = node.value[element]
                line = node.start_mark.line + 1
            else:
                return line
        return line


# A protocol holds a few thousand values; aliases may repeat a block, but a document that expands past this
# many (a 4 KB "billion laughs" file reaches 10^9) is refused before anything walks or builds it.
MAX_EXPANDED_NODES = 100_000
# Nor may aliases repeat one long string past this many characters in all: within the node budget a 97 KB
# file would otherwise expand to hundreds of MB of canonical JSON, registered in an append-only ledger.
MAX_EXPANDED_CHARS = 2 * MAX_DOCUMENT_BYTES


@dataclass
class _Budget:
    """What is left of the expanded document's budgets, spent as the node tree is walked alias by alias."""

    nodes: int = MAX_EXPANDED_NODES
    chars: int = MAX_EXPANDED_CHARS


def _refuse(file: str, line: int | None, message: str) -> ProtocolError:
    return ProtocolError([ProtocolIssue(file, line, "", message)])


def _reject_duplicate_keys(node: yaml.Node, file: str, budget: _Budget | None = None) -> None:
    budget = budget if budget is not None else _Budget()
    budget.nodes -= 1
    if budget.nodes < 0:
        raise _refuse(
            file,
            None,
            f"the document expands to more than {MAX_EXPANDED_NODES:,} values through YAML aliases "
            "(an alias bomb?): refused",
        )
    if isinstance(node, yaml.ScalarNode):
        if len(node.value) > MAX_STRING_CHARS:
            raise _refuse(
                file,
                node.start_mark.line + 1,
                f"a value of {len(node.value):,} characters, past the budget of {MAX_STRING_CHARS:,} for one string",
            )
        budget.chars -= len(node.value)
        if budget.chars < 0:
            raise _refuse(
                file,
                None,
                f"the document expands to more than {MAX_EXPANDED_CHARS:,} characters through YAML aliases: refused",
            )
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            _reject_duplicate_keys(key_node, file, budget)
            key = key_node.value
            if key in seen:
                raise ProtocolError(
                    [
                        ProtocolIssue(
                            file,
                            key_node.start_mark.line + 1,
                            key,
                            f"duplicate key {key!r} (first given on line {seen[key]})",
                        )
                    ]
                )
            seen[key] = key_node.start_mark.line + 1
            _reject_duplicate_keys(value_node, file, budget)
    elif isinstance(node, yaml.SequenceNode):
        for child in node.value:
            _reject_duplicate_keys(child, file, budget)


def bounded_yaml(text: str, file: str) -> Any:
    """The data of one YAML document, within the expanded budgets (``ProtocolError`` or ``yaml.YAMLError``)."""
    return _Document(text, file).data


def load_protocol(path: str | Path) -> Protocol:
    """Read, parse and validate a protocol file; raise ``ProtocolError`` with located issues."""
    return load_model_file(path, Protocol, "protocol").located_at(Path(path).resolve().parent)


def parse_protocol(text: str, file: str = "<string>") -> Protocol:
    """Validate protocol YAML text; ``file`` is only used in messages."""
    return parse_model_text(text, file, Protocol, "protocol")


def load_model_file(path: str | Path, model: type[BaseModel], what: str) -> Any:
    """Any strict YAML document (protocol, claim file, release mapping) with located errors."""
    file = str(path)
    try:
        text = read_text(path, what)
    except InputFileError as exc:
        raise ProtocolError([ProtocolIssue(file, None, "", str(exc).removeprefix(f"{file}: "))]) from None
    return parse_model_text(text, file, model, what)


def parse_model_text(text: str, file: str, model: type[BaseModel], what: str) -> Any:
    if not text.strip():
        raise ProtocolError([ProtocolIssue(file, None, "", f"the file is empty (expected a {what} mapping)")])
    try:
        document = _Document(text, file)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProtocolError([ProtocolIssue(file, line, "", f"unreadable YAML: {_unquoted(reason)}")]) from None
    except RecursionError:
        raise ProtocolError([ProtocolIssue(file, None, "", "unreadable YAML: nested too deeply")]) from None
    if not isinstance(document.data, dict):
        kind = type(document.data).__name__
        raise ProtocolError(
            [ProtocolIssue(file, document.line_of(()), "", f"expected a mapping of {what} fields, got a {kind}")]
        )
    if not _shares_a_field(document.data, model):
        raise ProtocolError(
            [
                ProtocolIssue(
                    file, None, "", f"not a {what} file: none of its {len(document.data)} keys is a {what} field"
                )
            ]
        )
    try:
        return model.model_validate(document.data)
    except ValidationError as exc:
        raise ProtocolError(_issues_from_validation(exc, document)) from None


def _unquoted(reason: str) -> str:
    """PyYAML's reason without what it quotes of the file (an alias, a tag, a character): a file that is not
    YAML, given by mistake or by a stranger, is named, never shown. Its token names ('<block end>') stay."""
    return re.sub(r"'(?!<)[^']*'|\"[^\"]*\"", "", reason).replace("  ", " ").strip()


def _shares_a_field(data: dict, model: type[BaseModel]) -> bool:
    """Whether a mapping has at least one of the model's fields, or a key close to one (a typo is told where it
    is): a config or a note passed where a protocol is expected is refused whole, without a line per key
    naming the file's own keys."""
    names = [key for name, field in model.model_fields.items() for key in (name, field.alias) if key]
    return not data or any(
        str(key) in names or difflib.get_close_matches(str(key), names, n=1, cutoff=0.8) for key in data
    )


def _issues_from_validation(exc: ValidationError, document: _Document) -> list[ProtocolIssue]:
    issues: list[ProtocolIssue] = []
    for error in exc.errors(include_url=False):
        base = _data_path(error["loc"], document.data)
        ctx = error.get("ctx") or {}
        if error["type"] == "protocol_references":
            for message, at in ctx["problems"]:
                issues.append(_issue(document, (*base, *at), message))
            continue
        message, at = _friendly(error, ctx)
        issues.append(_issue(document, (*base, *at), message))
    # One issue per place and reason: unions can report the same problem twice.
    unique = list(dict.fromkeys(issues))
    return unique


def _friendly(error: Any, ctx: dict) -> tuple[str, tuple[Any, ...]]:
    """Pydantic's message, reworded where a person would otherwise have to guess."""
    kind = error["type"]
    if kind == "missing":
        return "required field is missing", ()
    if kind == "union_tag_invalid":
        field = str(ctx.get("discriminator", "kind")).strip("'")
        expected = [tag.strip(" '") for tag in str(ctx.get("expected_tags", "")).split(",") if tag.strip()]
        tag = str(ctx.get("tag"))
        close = difflib.get_close_matches(tag, expected, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"expected one of: {', '.join(expected)}"
        return f"unknown {field} {tag!r} ({hint})", (field,)
    if kind == "union_tag_not_found":
        field = str(ctx.get("discriminator", "kind")).strip("'")
        return f"required field {field!r} is missing (it decides which fields are allowed)", ()
    return error["msg"], tuple(ctx.get("at", ()))


def _issue(document: _Document, path: tuple[Any, ...], message: str) -> ProtocolIssue:
    dotted = ".".join(str(part) for part in path)
    return ProtocolIssue(document.file, document.line_of(path), dotted, message.splitlines()[0])


# the fields whose value tags a union member (a claim's statistic, a gate's or arm's kind, a manifest's generator)
_DISCRIMINATORS = ("statistic", "kind", "generator")


def _data_path(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """Drop Pydantic's union tags from ``loc`` so it names keys and indices of the YAML."""
    path: list[Any] = []
    node = data
    tag_seen = False  # a mapping's own union tag comes once, before its fields
    for element in loc:
        if isinstance(node, dict):
            if not tag_seen and any(node.get(key) == element for key in _DISCRIMINATORS):
                tag_seen = True  # the tag ("gate" of `statistic: gate`), even where a field has its name
                continue
            if element in node:
                tag_seen = False
                path.append(element)
                node = node[element]
            elif element in node.values() or "[" in str(element):
                continue  # a discriminator tag such as 'recurrent' or a validator name
            else:
                path.append(element)
                node = None
        elif isinstance(node, list) and isinstance(element, int):
            path.append(element)
            node = node[element] if element < len(node) else None
        elif isinstance(element, int) or node is not None:
            path.append(element)
            node = None
        else:
            path.append(element)
    return tuple(path)


def locate(file: str | Path, problems: list[tuple[tuple[Any, ...], str]]) -> list[ProtocolIssue]:
    """``(path, message)`` problems found after loading, as issues with the YAML line of each path."""
    document = _Document(read_text(file, "protocol"), str(file))
    return [_issue(document, path, message) for path, message in problems]
