"""The report's PNG figures, drawn with matplotlib's Agg canvas (never pyplot's global backend).

matplotlib is imported inside the functions that draw, so that importing the report
(or anything that imports it) stays fast. Same inputs, same matplotlib: same PNG bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np

from ledger.report.claim_effects import ClaimEffect
from ledger.report.data import ArmSeries, HeatmapGrid, StageLosses

FRONTIER_BAR = 0.71  # (1/4)^(1/4): docs/science.md, design S
DPI = 100
_PNG_METADATA = {"Software": None}  # no version string, no time: identical bytes on re-runs
_STYLE = "default"  # ignore a user's matplotlibrc: same inputs, same pixels
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h", "p")


@contextmanager
def figure_style() -> Iterator[None]:
    """matplotlib's default style for every figure drawn inside."""
    import matplotlib.style

    with matplotlib.style.context(_STYLE):
        yield


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI, metadata=_PNG_METADATA)


def series_colors(labels: list[str]) -> dict[str, tuple]:
    import matplotlib

    palette = (
        # the qualitative maps are ListedColormaps (their colours as a list)
        list(cast(Any, matplotlib.colormaps["tab10"]).colors)
        if len(labels) <= 10
        else list(cast(Any, matplotlib.colormaps["tab20"]).colors)
    )
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def accuracy_figure(
    path: Path, manifest: str, series: list[ArmSeries], support: tuple[int, int] | None, colors: dict[str, tuple]
) -> None:
    figure = _new_figure(9.0, 5.0)
    axes = figure.add_axes((0.08, 0.11, 0.68, 0.80))
    depths = sorted({point.depth for s in series for point in s.points})
    if support is not None:
        axes.axvspan(
            support[0] - 0.5,
            support[1] + 0.5,
            color="0.88",
            zorder=0,
            label=f"training support {support[0]}-{support[1]}",
        )
    axes.axhline(
        FRONTIER_BAR, color="0.45", linestyle="--", linewidth=1, zorder=1, label=f"frontier bar {FRONTIER_BAR}"
    )
    for index, s in enumerate(series):
        if not s.points:
            continue
        x = np.array([p.depth for p in s.points], dtype=float)
        y = np.array([p.accuracy for p in s.points])
        error = np.array([[p.accuracy - p.low for p in s.points], [p.high - p.accuracy for p in s.points]])
        axes.errorbar(
            x,
            y,
            yerr=error,
            color=colors[s.label],
            marker=_MARKERS[index % len(_MARKERS)],
            markersize=4,
            linewidth=1.3,
            capsize=2.5,
            elinewidth=0.9,
            label=s.label,
            zorder=3,
        )
    axes.set_xlabel("row depth (hops)")
    axes.set_ylabel("final accuracy (Wilson 95% CI)")
    axes.set_title(f"Per-depth accuracy on manifest {manifest}")
    axes.set_ylim(-0.03, 1.03)
    if depths:
        axes.set_xlim(depths[0] - 0.7, depths[-1] + 0.7)
        axes.set_xticks(depths)
    axes.grid(True, axis="y", color="0.9", linewidth=0.6)
    axes.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, title="arm", title_fontsize=9, frameon=False)
    _save(figure, path)


def heatmap_figure(path: Path, manifest: str, grid: HeatmapGrid) -> None:
    n_depths, n_loops = len(grid.depths), len(grid.loops)
    width = min(12.0, 2.6 + 0.5 * n_loops)
    height = min(10.0, 1.7 + 0.42 * n_depths)
    figure = _new_figure(width, height)
    axes = figure.add_axes((0.16, 0.16, 0.64, 0.70))
    values = [[np.nan if v is None else v for v in row] for row in grid.values]
    data = np.ma.masked_invalid(np.array(values, dtype=float))
    import matplotlib

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.82")
    image = axes.imshow(data, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", origin="upper", interpolation="nearest")
    axes.set_xticks(range(n_loops), [str(loop) for loop in grid.loops])
    axes.set_yticks(range(n_depths), [str(depth) for depth in grid.depths])
    axes.set_xlabel("loop t")
    axes.set_ylabel("row depth")
    axes.set_title(f"Active-label accuracy: {grid.label} on {manifest}", fontsize=10)
    if n_loops <= 16 and n_depths <= 16:
        for i, row in enumerate(grid.values):
            for j, value in enumerate(row):
                if value is not None:
                    axes.text(
                        j,
                        i,
                        f"{100 * value:.0f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if value < 0.6 else "black",
                    )
    colorbar_axes = figure.add_axes((0.84, 0.16, 0.03, 0.70))
    colorbar = figure.colorbar(image, cax=colorbar_axes)
    colorbar.set_label("share = t-th intermediate symbol")
    _save(figure, path)


def latency_figure(path: Path, manifest: str, series: list[ArmSeries], colors: dict[str, tuple]) -> None:
    figure = _new_figure(9.0, 5.0)
    axes = figure.add_axes((0.08, 0.11, 0.68, 0.80))
    latencies: list[float] = []
    for index, s in enumerate(series):
        points = [p for p in s.points if p.median_latency_ms is not None]
        if not points:
            continue
        x = [float(p.median_latency_ms) for p in points if p.median_latency_ms is not None]
        y = [p.accuracy for p in points]
        latencies.extend(x)
        axes.plot(
            x,
            y,
            linestyle="none",
            marker=_MARKERS[index % len(_MARKERS)],
            markersize=6,
            color=colors[s.label],
            label=s.label,
        )
        for p in points:
            axes.annotate(
                str(p.depth),
                (p.median_latency_ms, p.accuracy),
                textcoords="offset points",
                xytext=(3, 3),
                fontsize=6,
                color=colors[s.label],
            )
    if latencies and min(latencies) > 0 and max(latencies) / min(latencies) > 20:
        axes.set_xscale("log")
    axes.set_xlabel("median latency per row (ms), batch 1")
    axes.set_ylabel("final accuracy")
    axes.set_ylim(-0.03, 1.03)
    axes.set_title(f"Accuracy vs latency per depth on manifest {manifest} (labels: depth)")
    axes.grid(True, color="0.9", linewidth=0.6)
    axes.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, title="arm", title_fontsize=9, frameon=False)
    _save(figure, path)


def loss_figure(path: Path, arm: str, spans: list[StageLosses]) -> None:
    """One arm's training loss at every step of every stage, one after another; a dotted line where a stage
    begins, named at the top."""
    figure = _new_figure(9.0, 3.2)
    axes = figure.add_axes((0.08, 0.16, 0.88, 0.70))
    begun: set[str] = set()
    start = 0
    for span in spans:
        stage = span.stage.split("@")[0]  # install@20 is a checkpoint inside stage install
        if stage not in begun:
            begun.add(stage)
            axes.axvline(start, color="0.6", linestyle=":", linewidth=1)
            axes.annotate(stage, (start, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="bottom")
        axes.plot(np.arange(start, start + len(span.losses)), np.array(span.losses), color="C0", linewidth=1.0)
        start += len(span.losses)
    axes.set_xlabel("training step (stages one after another)")
    axes.set_ylabel("loss")
    axes.set_title(f"Training loss of arm {arm}", pad=14)
    axes.grid(True, axis="y", color="0.9", linewidth=0.6)
    _save(figure, path)


_OUTCOME_COLORS = {"supported": "#1a7f37", "refuted": "#cf222e"}  # anything else (unverifiable, none): grey


def claims_figure(path: Path, effects: list[ClaimEffect]) -> None:
    """The forest plot at the head of the report: one row per claim with an effect size, one panel per scale.
    Each row: the effect (coloured by the first outcome), its interval, and its bar as a black tick (the claim
    holds on the side the small arrow points); the paper's figure, where the claim carries one, on the right."""
    scales = list(dict.fromkeys(effect.scale for effect in effects))
    rows = [[effect for effect in effects if effect.scale == scale] for scale in scales]
    figure = _new_figure(11.0, 0.9 + sum(0.32 * len(panel) + 0.55 for panel in rows))
    grid = figure.add_gridspec(len(rows), 1, height_ratios=[len(panel) + 1.2 for panel in rows], hspace=0.55,
                               left=0.24, right=0.70, top=0.97, bottom=0.06)  # fmt: skip
    for index, (scale, panel) in enumerate(zip(scales, rows, strict=True)):
        axes = figure.add_subplot(grid[index])
        for row, effect in enumerate(reversed(panel)):
            color = _OUTCOME_COLORS.get(effect.outcome or "", "0.55")
            if effect.low is not None and effect.high is not None:
                axes.hlines(row, effect.low, effect.high, color=color, linewidth=1.6)
            axes.plot([effect.value], [row], marker="o", color=color, markersize=5, zorder=3)
            if effect.bar is not None:
                axes.plot([effect.bar], [row], marker="|", color="black", markersize=13, markeredgewidth=1.6)
                side, shift = {True: ("▶", 5), False: ("◀", -5), None: ("◀▶", 0)}[effect.holds_above]
                axes.annotate(
                    side, (effect.bar, row), xytext=(shift, 6), textcoords="offset points", fontsize=6, ha="center"
                )
            if effect.paper:
                axes.annotate(f"paper: {effect.paper}", (1.02, row), xycoords=("axes fraction", "data"), fontsize=7,
                              va="center", annotation_clip=False)  # fmt: skip
        # a claim's own id, without the namespace every claim of the report shares
        axes.set_yticks(
            range(len(panel)), [effect.claim_id.rsplit("/", 1)[-1] for effect in reversed(panel)], fontsize=7
        )
        axes.set_ylim(-0.7, len(panel) - 0.3)
        axes.set_xlabel(f"{scale} (line: the interval its statistic gives; none: one run)", fontsize=8)
        axes.grid(True, axis="x", color="0.9", linewidth=0.6)
        axes.tick_params(axis="x", labelsize=7)
    _save(figure, path)
