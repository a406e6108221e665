"""Why attention divides by sqrt(d_k) (section 3.2.1), measured and drawn.

`dot_product_statistics` measures scaled and unscaled dot products of random
queries and keys; `plot_dot_product_variance` draws them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from transformer._validation import check_positive_int
from transformer.plot._figure import _invalid, _new_figure

__all__ = ["dot_product_statistics", "plot_dot_product_variance"]

# ------------------------------------------------------- why divide by sqrt(d_k)


def dot_product_statistics(
    d_ks: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    *,
    num_samples: int = 2000,
    num_keys: int = 16,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Measures dot-product growth and softmax saturation, with and without scaling.

    Section 3.2.1 of Vaswani et al., 2017: "assume that the components of q and
    k are independent random variables with mean 0 and variance 1. Then their
    dot product q . k has mean 0 and variance d_k." Scaling by `1/sqrt(d_k)`
    brings the variance back to 1, which keeps the softmax out of its saturated
    regime where one weight is ~1 and the gradients vanish.

    For each `d_k`, `num_samples` queries each meet `num_keys` keys, all drawn
    i.i.d. from N(0, 1) with a seeded numpy generator.

    Args:
        d_ks: key depths to measure, positive integers.
        num_samples: number of queries per depth.
        num_keys: keys per query (the softmax's length).
        seed: seed of `numpy.random.default_rng`.

    Returns:
        A dict of float arrays, one value per `d_k`: `d_k`, `variance_unscaled`
        (var of q . k, ~d_k), `variance_scaled` (var of q . k / sqrt(d_k), ~1),
        `max_weight_unscaled` / `max_weight_scaled` (mean largest softmax
        weight of a row) and `entropy_unscaled` / `entropy_scaled` (mean
        softmax entropy in nats; `log(num_keys)` is uniform attention).

    Example:

    >>> stats = dot_product_statistics((4, 64, 512))
    >>> stats["variance_unscaled"].round()  # about d_k
    array([  4.,  63., 512.])
    >>> stats["variance_scaled"].round(1)  # about 1
    array([1., 1., 1.])
    """
    for name, value in (("num_samples", num_samples), ("num_keys", num_keys)):
        check_positive_int(name, value)
    d_ks = [int(d) for d in d_ks]
    if not d_ks:
        raise _invalid("d_ks", "a non-empty sequence of positive integers", "[]")
    for d_k in d_ks:
        check_positive_int("d_k", d_k)
    rng = np.random.default_rng(seed)
    stats: dict[str, list[float]] = {
        key: []
        for key in (
            "variance_unscaled",
            "variance_scaled",
            "max_weight_unscaled",
            "max_weight_scaled",
            "entropy_unscaled",
            "entropy_scaled",
        )
    }
    for d_k in d_ks:
        q = rng.standard_normal((num_samples, d_k))  # (num_samples, d_k)
        k = rng.standard_normal((num_samples, num_keys, d_k))  # (num_samples, num_keys, d_k)
        logits = np.einsum("nd,nkd->nk", q, k)  # (num_samples, num_keys)
        for suffix, scaled in (("unscaled", logits), ("scaled", logits / math.sqrt(d_k))):
            for key, value in _softmax_statistics(scaled).items():
                stats[f"{key}_{suffix}"].append(value)
    result = {"d_k": np.asarray(d_ks, dtype=np.float64)}
    result.update({key: np.asarray(values) for key, values in stats.items()})
    return result


def _softmax_statistics(logits: np.ndarray) -> dict[str, float]:
    """Variance of `(num_samples, num_keys)` logits, mean top softmax weight and entropy."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    weights /= weights.sum(axis=-1, keepdims=True)  # (num_samples, num_keys)
    entropy = -np.sum(weights * np.log(np.clip(weights, 1e-300, None)), axis=-1)
    return {
        "variance": float(logits.var()),
        "max_weight": float(weights.max(axis=-1).mean()),
        "entropy": float(entropy.mean()),
    }


def plot_dot_product_variance(
    d_ks: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    *,
    num_samples: int = 2000,
    num_keys: int = 16,
    seed: int = 0,
    figsize=None,
) -> Figure:
    """Shows why attention divides by sqrt(d_k) (section 3.2.1).

    Three panels from `dot_product_statistics`: the variance of q . k against
    d_k (it grows as d_k unscaled, stays at 1 scaled), the mean largest softmax
    weight of a row (unscaled it tends to 1: the softmax saturates into a hard
    one-hot choice with tiny gradients) and the mean softmax entropy (unscaled it
    collapses towards 0; uniform attention over `num_keys` keys is
    `log(num_keys)`). The paper's d_k = 64 is marked.

    Args:
        d_ks: key depths to measure.
        num_samples: queries per depth.
        num_keys: keys per query.
        seed: seed of the numpy generator.
        figsize: figure size in inches.

    Returns:
        A `Figure` with three axes.

    Example:

    >>> fig = plot_dot_product_variance((1, 8, 64), num_samples=200)
    >>> len(fig.axes)
    3
    """
    stats = dot_product_statistics(d_ks, num_samples=num_samples, num_keys=num_keys, seed=seed)
    d = stats["d_k"]
    fig = _new_figure(figsize or (13.0, 4.0))
    axes = fig.subplots(1, 3)
    _draw_statistics(axes, stats)
    _draw_references(axes, d, num_keys)
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Why divide by sqrt(d_k) (section 3.2.1): q, k ~ N(0, 1), seed {seed}; "
        "dotted line: the paper's d_k = 64"
    )
    return fig


def _draw_statistics(axes, stats: dict[str, np.ndarray]) -> None:
    """One panel per statistic, unscaled and scaled against d_k, the paper's 64 dotted."""
    d = stats["d_k"]
    styles = {
        "unscaled": {"color": "C3", "marker": "o", "label": "q . k (unscaled)"},
        "scaled": {"color": "C0", "marker": "s", "label": "q . k / sqrt(d_k) (scaled)"},
    }
    panels = (
        ("variance", "variance of the logits"),
        ("max_weight", "mean largest softmax weight"),
        ("entropy", "mean softmax entropy (nats)"),
    )
    for ax, (key, ylabel) in zip(axes, panels, strict=True):
        for suffix, style in styles.items():
            ax.plot(d, stats[f"{key}_{suffix}"], **style)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("d_k")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if 64 >= d.min() and 64 <= d.max():
            ax.axvline(64, color="grey", linestyle=":", linewidth=1.0)


def _draw_references(axes, d: np.ndarray, num_keys: int) -> None:
    """The theory's d_k and uniform attention as dashed lines, and the panel titles."""
    axes[0].set_yscale("log", base=2)
    axes[0].yaxis.set_major_formatter(ScalarFormatter())
    axes[0].plot(d, d, color="grey", linestyle="--", linewidth=1.0, label="d_k (theory)")
    axes[0].set_title("Dot products grow with d_k")
    axes[1].axhline(
        1.0 / num_keys, color="grey", linestyle="--", linewidth=1.0, label=f"uniform (1/{num_keys})"
    )
    axes[1].set_ylim(0.0, 1.05)
    axes[1].set_title(f"Softmax saturates ({num_keys} keys)")
    axes[2].axhline(
        math.log(num_keys),
        color="grey",
        linestyle="--",
        linewidth=1.0,
        label=f"uniform (log {num_keys})",
    )
    axes[2].set_ylim(bottom=0.0)
    axes[2].set_title("Attention entropy collapses")
