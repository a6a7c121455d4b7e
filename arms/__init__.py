"""arms: the systems under test (model surgery, bridges, adapters, dense baselines)."""
