"""A small, complete example ledger: one row in every table (used by tests and demos)."""

from __future__ import annotations

from ledger.rows.manifest import Manifest, Row


def example_manifest(n_rows: int = 8, name: str = "example-eval") -> Manifest:
    rows = tuple(
        Row(
            row_id=f"{name}-{i:04d}",
            task="rule_chasing",
            surface="symbolic",
            depth=1 + i % 4,
            prompt=f"start at A, apply the table {1 + i % 4} times",
            answer="AB"[i % 2],
            path=["A", "B"] * (1 + i % 4),
            symbols=["A", "B"],
            table={"A": "B", "B": "A"},
            start="A",
        )
        for i in range(n_rows)
    )
    return Manifest(name=name, rows=rows)


def populate_example(store, n_rows: int = 8) -> dict:
    """Write a protocol, deviation, manifest, run, checkpoints with gates, evidence, a claim,
    a statistical test and an outcome, plus one chain-only note. Returns the keys written."""
    protocol = store.add_protocol(
        {"name": "example", "version": "1.0", "arms": ["loop", "dense"], "claims": ["loop-beats-dense"]}
    )
    revised = store.add_protocol({"name": "example", "version": "1.1", "arms": ["loop", "dense"]})
    store.add_deviation(
        protocol,
        item="training.lr",
        planned=0.001,
        actual=0.0005,
        reason="divergence at step 10",
        timing="before_data",
        new_protocol_sha256=revised,
    )
    manifest = example_manifest(n_rows)
    manifest_sha = store.add_manifest(manifest, protocol_sha256=protocol)
    run = store.add_run(
        run_id="run-example",
        kind="eval",
        protocol_sha256=protocol,
        arm="loop",
        config={"loops": [1, 2]},
        environment={"python": "3.11"},
        rng={"seed": 0},
        note="example",
    )
    base = store.add_checkpoint(sha256="b" * 64, arm="base", status="promoted", path="base.safetensors", stage="base")
    loop_ck = store.add_checkpoint(
        sha256="c" * 64,
        arm="loop",
        status="promoted",
        path="loop.safetensors",
        parent_sha256=base,
        run_id=run,
        stage="phase-a",
        gate_results=[
            {
                "gate": "retention",
                "passed": True,
                "metric": "acc",
                "value": 0.91,
                "threshold": 0.9,
                "comparison": ">=",
                "detail": {"n": 100},
            },
        ],
        meta={"steps": 10},
    )
    evidence = [
        {
            "run_id": run,
            "manifest_sha256": manifest_sha,
            "row_id": row.row_id,
            "arm": arm,
            "checkpoint_sha256": loop_ck if arm == "loop" else base,
            "loop": loop,
            "prediction": "AB"[(i + loop) % 2],
            "correct": (i + loop) % 3 != 0,
            "score_margin": 0.25 * (i % 4),
            "latency_ms": 1.5 + i,
            "tokens_generated": 1,
            "detail": {"i": i},
        }
        for i, row in enumerate(manifest.rows)
        for arm, loop in (("loop", 1), ("loop", 2), ("dense", 0))
    ]
    store.add_evidence(evidence)
    # the readings the example test computed on: loop 2 of the loop arm, loop 0 of the dense arm
    used = store.query(
        "SELECT id FROM evidence WHERE (arm = 'loop' AND loop = 2) OR (arm = 'dense' AND loop = 0)"
    ).records()
    store.add_claim(
        "loop-beats-dense",
        {"statistic": "accuracy_difference", "direction": ">", "threshold": 0.0},
        protocol_sha256=protocol,
    )
    test_id = store.add_stat_test(
        test_id="test-1",
        claim_id="loop-beats-dense",
        statistic="accuracy_difference",
        method="paired bootstrap",
        n=n_rows,
        estimate=0.125,
        ci_low=-0.1,
        ci_high=0.3,
        p_value=0.2,
        params={"resamples": 1000},
        result={"note": "example"},
        evidence_ids=[row["id"] for row in used],
        inputs=[
            {
                "role": "a",
                "arm": "loop",
                "checkpoint_sha256": loop_ck,
                "manifest_sha256": manifest_sha,
                "run_id": run,
                "loop": 2,
            },
            {
                "role": "b",
                "arm": "dense",
                "checkpoint_sha256": base,
                "manifest_sha256": manifest_sha,
                "run_id": run,
                "loop": 0,
            },
        ],
    )
    store.add_claim_outcome(
        "loop-beats-dense", "unverifiable", "CI includes 0", stat_test_id=test_id, detail={"alpha": 0.05}
    )
    store.append("note", {"text": "example ledger complete"})
    return {
        "protocol": protocol,
        "revised_protocol": revised,
        "manifest": manifest_sha,
        "run": run,
        "base": base,
        "checkpoint": loop_ck,
        "test_id": test_id,
        "n_evidence": len(evidence),
    }
