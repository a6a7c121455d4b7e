"""What a walk of the chain finds: each problem, located, and the report they add up to (the walk's checks, in
``chain_walk`` and ``chain_rows``, each add to one report and never stop the walk)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger.store import merkle


@dataclass(frozen=True)
class ChainProblem:
    table: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.table} {self.key}: {self.message}"


@dataclass
class ChainReport:
    n_entries: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    root: str = merkle.EMPTY_ROOT.hex()
    problems: list[ChainProblem] = field(default_factory=list)
    # the leaves recomputed from the payloads (a consistency proof is built from them, not from what is stored)
    leaves: list[bytes] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def messages(self) -> list[str]:
        return [str(problem) for problem in self.problems]

    def add(self, table_name: str, key: str, message: str) -> None:
        self.problems.append(ChainProblem(table_name, key, message))

    def summary(self) -> str:
        head = f"{self.n_entries} chain entries, {sum(self.rows.values())} rows, root {self.root}"
        if self.ok:
            return f"chain OK: {head}"
        return f"chain BROKEN ({len(self.problems)} problems): {head}\n" + "\n".join(
            "  " + message for message in self.messages
        )
