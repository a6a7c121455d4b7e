"""What one pass of a run does, handed to ``Runner.run``: which arms it trains, whether it judges the claims,
whether it resumes, and on which device. ``--parallel``'s parent runs its own group of arms, then a judging pass
over them all, and Slurm's judging job judges without training: each pass says so here, and nobody sets the
runner's fields between passes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunPass:
    arm_ids: tuple[str, ...] | None = None  # None: every arm the runner was built for
    judge: bool | None = None  # None: as the runner was built (False: the arms only, a later pass judges)
    resume: bool | None = None  # None: as the runner was built
    judging_pass: bool = False  # after --parallel's children: an arm a child hard-stopped is reported as stopped
    judge_only: bool = False  # the arms that finished are judged, none is trained (Slurm's judging job)
    device: str | None = None  # None: the runner's device choice
