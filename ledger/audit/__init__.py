"""Stage 6, audit: preregistration and deviations, imports of released rows, verification."""
