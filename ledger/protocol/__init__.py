"""Stage 1, what is declared: the protocol, claim and release-mapping schemas and their YAML loading."""
