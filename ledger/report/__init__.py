"""Stage 7, the report: HTML and figures written from the ledger alone."""
