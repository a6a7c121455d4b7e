"""The people of the generated texts and word problems: names every tiny base's vocabulary holds (not the rule
chasing's alphabets, ``ledger.rows.tasks.alphabets``)."""

from __future__ import annotations

PEOPLE = ("Amy", "Ann", "Ben", "Bob", "Dan", "Emma", "Eve", "Jack", "Jane", "Jim", "Joe", "John")
