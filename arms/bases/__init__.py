"""Bases: offline loading of pretrained weights, the built-in tiny models, pretraining of tiny bases."""
