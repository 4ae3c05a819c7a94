"""PNG plots for evaluation reports: learning curves, Pass@(K,T) heatmap, success-vs-budget curves.

Uses matplotlib's object API on an Agg canvas (no pyplot global state, no display needed), so it
is safe in tests, CI and background threads. Each function writes one PNG and returns its path.
"""
from __future__ import annotations

import pathlib
from typing import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

Curve = tuple[Sequence[float], Sequence[float]]
"""(x, y) points of one line."""
BandCurve = tuple[Sequence[float], Sequence[float], Sequence[float] | None, Sequence[float] | None]
"""(x, y, low, high): a line with an optional confidence band (low/high may be None)."""


def _new_figure(size: tuple[float, float] = (6.0, 4.0)) -> Figure:
    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _xy(name: str, x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x_N, y_N = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x_N.ndim != 1 or x_N.shape != y_N.shape or x_N.size == 0:
        raise ValueError(f"curve {name!r} needs equal-length non-empty 1-D x and y, got {x_N.shape} and {y_N.shape}")
    return x_N, y_N


def plot_learning_curves(
    path: str | pathlib.Path,
    curves: Mapping[str, Curve],
    metric: str = "success rate",
    title: str = "Learning curves",
    xlabel: str = "training step",
) -> pathlib.Path:
    """One line per run/variant of `metric` against `xlabel`; curves = {label: (steps, values)}."""
    if not curves:
        raise ValueError("plot_learning_curves needs at least one curve")
    fig = _new_figure()
    ax = fig.add_subplot()
    for label, (steps, values) in curves.items():
        x_N, y_N = _xy(label, steps, values)
        ax.plot(x_N, y_N, marker="." if x_N.size < 50 else None, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def moving_mean(y: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving mean: m_i = mean(y_j for max(0, i - window + 1) <= j <= i)."""
    y_N = np.asarray(y, dtype=np.float64)
    if window < 1:
        raise ValueError(f"moving_mean needs window >= 1, got {window}")
    c_N = np.concatenate([[0.0], np.cumsum(y_N)])
    i_N = np.arange(1, y_N.size + 1)
    lo_N = np.maximum(0, i_N - window)
    return (c_N[i_N] - c_N[lo_N]) / (i_N - lo_N)


def plot_rl_curve(
    path: str | pathlib.Path,
    held_out: BandCurve | None,
    rollout: Curve | None,
    window: int = 5,
    title: str = "RL learning curve",
) -> pathlib.Path:
    """Held-out greedy success by RL iteration with its interval band, and the rollout success
    of each iteration (raw points faint, the trailing ``window``-iteration mean drawn)."""
    if held_out is None and rollout is None:
        raise ValueError("plot_rl_curve needs a held-out curve or a rollout curve")
    fig = _new_figure()
    ax = fig.add_subplot()
    if rollout is not None:
        x_N, y_N = _xy("rollout", *rollout)
        (raw,) = ax.plot(x_N, y_N, marker=".", linestyle="none", alpha=0.25, color="tab:gray")
        ax.plot(x_N, moving_mean(y_N, window), color="tab:gray",
                label=f"rollout success (training games, {window}-iteration mean)")
    if held_out is not None:
        x, y, low, high = held_out
        x_N, y_N = _xy("held-out", x, y)
        (line,) = ax.plot(x_N, y_N, marker="o", color="tab:blue",
                          label="held-out greedy success (95% interval)")
        if low is not None and high is not None:
            ax.fill_between(x_N, np.asarray(low, float), np.asarray(high, float),
                            color=line.get_color(), alpha=0.2)
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def plot_pass_at_k_t_heatmap(
    path: str | pathlib.Path,
    ks: Sequence[int],
    ts: Sequence[int],
    values_KT: np.ndarray,
    title: str = "Pass@(K,T)",
    difference: bool = False,
) -> pathlib.Path:
    """Heatmap of Pass@(K,T): rows K, columns T, colour in [0, 1], each cell annotated;
    ``difference``: a change in Pass@(K,T), on a diverging scale symmetric about 0."""
    values_KT = np.asarray(values_KT, dtype=np.float64)
    if values_KT.shape != (len(ks), len(ts)):
        raise ValueError(f"values_KT has shape {values_KT.shape}, expected (len(ks), len(ts)) = {(len(ks), len(ts))}")
    fig = _new_figure((max(4.5, 1.5 + 0.7 * len(ts)), max(3.0, 1.2 + 0.5 * len(ks))))
    ax = fig.add_subplot()
    if difference:
        span = max(0.05, float(np.nanmax(np.abs(values_KT))))
        image = ax.imshow(values_KT, vmin=-span, vmax=span, cmap="RdBu", aspect="auto", origin="lower")
    else:
        image = ax.imshow(values_KT, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(ts)), [str(t) for t in ts])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("turn budget T")
    ax.set_ylabel("attempts K")
    ax.set_title(title)
    for i in range(len(ks)):
        for j in range(len(ts)):
            v = values_KT[i, j]
            dark = abs(v) > 0.6 * span if difference else v < 0.6
            ax.text(j, i, f"{v:+.2f}" if difference else f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
    fig.colorbar(image, ax=ax)
    return _save(fig, path)


def plot_budget_curves(
    path: str | pathlib.Path,
    curves: Mapping[str, BandCurve],
    metric: str = "success rate",
    title: str = "Success vs turn budget",
) -> pathlib.Path:
    """Success against evaluation turn budget T, one line per training variant, with CI bands.

    curves = {variant: (budgets, values, low, high)}; low/high may be None (no band).
    """
    if not curves:
        raise ValueError("plot_budget_curves needs at least one curve")
    fig = _new_figure()
    ax = fig.add_subplot()
    for label, (budgets, values, low, high) in curves.items():
        x_N, y_N = _xy(label, budgets, values)
        (line,) = ax.plot(x_N, y_N, marker="o", label=label)
        if low is not None and high is not None:
            ax.fill_between(x_N, np.asarray(low, float), np.asarray(high, float), color=line.get_color(), alpha=0.2)
    ax.set_xlabel("turn budget T")
    ax.set_ylabel(metric)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)


def plot_grouped_bars(
    path: str | pathlib.Path,
    groups: Sequence[str],
    series: Mapping[str, tuple[Sequence[float], Sequence[float] | None, Sequence[float] | None]],
    metric: str = "rate",
    title: str = "",
) -> pathlib.Path:
    """Bars per group (x) and series (colour), with optional interval whiskers.

    series = {label: (values_G, low_G, high_G)}; low/high may be None (no whiskers) and hold
    NaN where a group's interval is unknown.
    """
    if not groups or not series:
        raise ValueError("plot_grouped_bars needs at least one group and one series")
    fig = _new_figure((max(6.0, 1.2 * len(groups) + 2), 4.0))
    ax = fig.add_subplot()
    width = 0.8 / len(series)
    x_G = np.arange(len(groups), dtype=np.float64)
    for i, (label, (values, low, high)) in enumerate(series.items()):
        v_G = np.asarray(values, np.float64)
        if v_G.shape != x_G.shape:
            raise ValueError(f"series {label!r} has {v_G.size} values for {len(groups)} groups")
        err = None
        if low is not None and high is not None:
            lo_G, hi_G = np.asarray(low, np.float64), np.asarray(high, np.float64)
            err = np.nan_to_num(np.stack([v_G - lo_G, hi_G - v_G]), nan=0.0)
        ax.bar(x_G + (i - (len(series) - 1) / 2) * width, np.nan_to_num(v_G), width, yerr=err,
               capsize=3, label=label)
    ax.set_xticks(x_G, list(groups), rotation=15, fontsize="small")
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)
