"""Stage 5, judging: paired statistics, gate verdicts and claim evaluation as pure functions of evidence."""
