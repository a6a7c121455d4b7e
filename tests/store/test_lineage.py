"""Lineage refusals are the store's own rule: failed or exploratory ancestry cannot be continued
(on both backends: ``db_url`` is a SQLite file and a PostgreSQL database)."""

from __future__ import annotations

import pytest

from ledger.store import LineageRefused, open_store


@pytest.fixture()
def store(db_url):
    store = open_store(db_url)
    yield store
    store.close()


def sha(char: str) -> str:
    return char * 64


def test_continuing_a_clean_promoted_lineage_is_allowed(store):
    store.add_checkpoint(sha256=sha("a"), arm="A", status="promoted", stage="base")
    store.add_checkpoint(
        sha256=sha("b"),
        arm="A",
        status="promoted",
        parent_sha256=sha("a"),
        stage="install",
        gate_results=[{"gate": "installation", "passed": True, "action": "stop"}],
    )
    store.add_checkpoint(sha256=sha("c"), arm="A", status="promoted", parent_sha256=sha("b"), stage="anneal")
    assert [row["ancestor_sha256"] for row in store.lineage(sha("c"))] == [sha("c"), sha("b"), sha("a")]


def test_failed_ancestor_refused_naming_ancestor_and_gate(store):
    store.add_checkpoint(sha256=sha("a"), arm="A", status="promoted", stage="base")
    store.add_checkpoint(
        sha256=sha("b"),
        arm="A",
        status="failed",
        parent_sha256=sha("a"),
        stage="install",
        gate_results=[{"gate": "tier1", "passed": False, "action": "stop", "value": 0.9}],
    )
    with pytest.raises(LineageRefused, match=r"ancestor bbbbbbbbbbbb .*failed gate tier1"):
        store.add_checkpoint(sha256=sha("c"), arm="A", status="promoted", parent_sha256=sha("b"))
    # Not even exploratory work may continue from a failed lineage.
    with pytest.raises(LineageRefused, match="failed gate tier1"):
        store.add_checkpoint(sha256=sha("c"), arm="A", status="exploratory", parent_sha256=sha("b"))


def test_a_later_failed_stop_gate_fails_the_whole_lineage_below_it(store):
    # Promoted at first; a guardrail measured afterwards fails -> descendants are refused,
    # two generations down too, although no row was updated.
    store.add_checkpoint(sha256=sha("a"), arm="A", status="promoted")
    store.add_checkpoint(sha256=sha("b"), arm="A", status="promoted", parent_sha256=sha("a"))
    store.add_gate_result(sha("a"), "retention_floor", False, action="stop", value=0.4, threshold=0.5)
    with pytest.raises(LineageRefused, match=r"aaaaaaaaaaaa .*generation 2.*failed gate retention_floor"):
        store.add_checkpoint(sha256=sha("c"), arm="A", status="promoted", parent_sha256=sha("b"))


def test_a_failed_flag_gate_does_not_block(store):
    store.add_checkpoint(
        sha256=sha("a"),
        arm="A",
        status="promoted",
        gate_results=[{"gate": "fisher", "passed": False, "action": "flag"}],
    )
    store.add_checkpoint(sha256=sha("b"), arm="A", status="promoted", parent_sha256=sha("a"))


def test_exploratory_ancestor_refused_for_promoted_work(store):
    store.add_checkpoint(sha256=sha("a"), arm="A", status="promoted")
    store.add_checkpoint(sha256=sha("b"), arm="A", status="exploratory", parent_sha256=sha("a"))
    store.add_checkpoint(sha256=sha("c"), arm="A", status="exploratory", parent_sha256=sha("b"))
    with pytest.raises(LineageRefused, match=r"ancestor cccccccccccc .* is exploratory"):
        store.add_checkpoint(sha256=sha("d"), arm="A", status="promoted", parent_sha256=sha("c"))
    with pytest.raises(LineageRefused, match="exploratory"):
        store.check_continuation(sha("c"))


def test_a_failed_stage_of_an_exploratory_lineage_is_recorded_as_failed(store):
    """A tuning run's hard stop is kept: its failed checkpoint is recorded, and nothing continues from it."""
    store.add_checkpoint(sha256=sha("a"), arm="A", status="exploratory")
    store.add_checkpoint(
        sha256=sha("b"),
        arm="A",
        status="failed",
        parent_sha256=sha("a"),
        gate_results=[{"gate": "tier1", "passed": False, "action": "stop"}],
    )
    assert store.get_checkpoint(sha("b"))["status"] == "failed"
    for status in ("exploratory", "failed", "promoted"):
        with pytest.raises(LineageRefused, match="failed gate tier1"):
            store.add_checkpoint(sha256=sha("c"), arm="A", status=status, parent_sha256=sha("b"))
    with pytest.raises(LineageRefused, match="exploratory"):  # still: nothing promoted from tuning
        store.add_checkpoint(sha256=sha("d"), arm="A", status="promoted", parent_sha256=sha("a"))


def test_unknown_parent_refused(store):
    with pytest.raises(LineageRefused, match=r"ancestor 9999.* is not in the ledger"):
        store.add_checkpoint(sha256=sha("c"), arm="A", status="promoted", parent_sha256=sha("9"))
    assert store.head()[1] == 0  # nothing was written
