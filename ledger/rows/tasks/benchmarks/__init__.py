"""The row ids of public benchmarks, as the split-bridge paper's release read them (one ``split:id`` a line).

A protocol's local benchmark file names one of these (``ids``) and must hold exactly its questions: the
public datasets' own ids (AI2's ARC: train, validation and test together), shipped here so that a run needs
nothing but the user's copy of the data.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

BENCHMARKS = ("arc_easy", "arc_challenge")


@cache
def benchmark_ids(name: str) -> dict[str, str]:
    """The benchmark's ids: the dataset's own id -> its split, in the release's order."""
    if name not in BENCHMARKS:
        raise KeyError(f"no id list for benchmark {name!r} (known: {', '.join(BENCHMARKS)})")
    text = resources.files(__package__).joinpath(f"{name}.ids").read_text(encoding="utf-8")
    ids: dict[str, str] = {}
    for line in text.splitlines():
        split, _, row_id = line.partition(":")
        ids[row_id] = split
    return ids
