"""Stage 2, the rows: task generators, manifests (hashed rows) and the contamination check."""
