"""Scores to numpy without importing torch: one row's scores (1-D) or a batch (2-D)."""

from __future__ import annotations

from typing import Any

import numpy as np


def _to_numpy_1d(scores: Any) -> np.ndarray:
    if hasattr(scores, "detach"):  # a torch tensor, without importing torch
        scores = scores.detach()
        if hasattr(scores, "float"):
            scores = scores.float()
        scores = scores.cpu().numpy()
    array = np.asarray(scores, dtype=np.float64)
    while array.ndim > 1 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1:
        raise ValueError(
            f"scores for one row must be one-dimensional (got shape {array.shape}); use decode_batch for a batch"
        )
    return array


def _to_numpy_2d(scores: Any) -> np.ndarray:
    if hasattr(scores, "detach"):
        scores = scores.detach()
        if hasattr(scores, "float"):
            scores = scores.float()
        scores = scores.cpu().numpy()
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"batch scores must be two-dimensional (got shape {array.shape})")
    return array
