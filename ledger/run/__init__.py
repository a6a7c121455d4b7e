"""Stage 8, orchestration: `ledger run` drives every stage for a protocol's arms."""
