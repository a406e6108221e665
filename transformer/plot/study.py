"""Figures of the study notes: one query worked through, attention costs,
positional encoding in detail, the three uses of attention side by side, and
the checks of the model opened up.

Each function draws numbers it is given (measured by the caller on the
library's own tensors) and returns a `matplotlib.figure.Figure`; none computes
attention itself. Section numbers are those of Vaswani et al., 2017.

Example:

>>> import numpy as np
>>> from transformer.plot.study import plot_query_walkthrough
>>> fig = plot_query_walkthrough(["a", "b", "c"], np.array([1.0, 4.0, 2.0]), d_k=4,
...                              values=np.eye(3))
>>> fig.savefig("one_query.png")
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from transformer.plot._figure import (
    _as_tokens,
    _invalid,
    _matrix,
    _new_figure,
    _set_token_ticks,
    _to_numpy,
)
from transformer.plot.diagrams import ATTENTION_COLORS

__all__ = [
    "plot_attention_costs",
    "plot_label_smoothing",
    "plot_layer_checks",
    "plot_linear_map",
    "plot_matrices",
    "plot_position_similarity",
    "plot_query_walkthrough",
    "plot_shuffled_outputs",
    "plot_sinusoids",
    "plot_three_uses",
]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _check_length(name: str, values: np.ndarray, length: int) -> None:
    if len(values) != length:
        raise _invalid(name, f"{length} entries, one per key", f"{len(values)} entries")


# --------------------------------------------------- one query, step by step


def plot_query_walkthrough(
    key_tokens, scores, d_k: int, values, query_label: str = "the query"
) -> Figure:
    """One query of scaled dot-product attention (section 3.2.1), step by step.

    Five panels, left to right: the dot products `q . k_j` with every key, the
    same divided by `sqrt(d_k)`, their softmax (the weights), each value row
    multiplied by its weight, and the output, the sum of those rows.

    Args:
        key_tokens: labels of the `n` keys.
        scores: the `n` dot products `q . k_j`, unscaled.
        d_k: the depth of queries and keys.
        values: the `(n, d_v)` value rows.
        query_label: what to call the query in the title.

    Returns:
        The figure.
    """
    tokens = _as_tokens(key_tokens, "key_tokens")
    scores = _to_numpy(scores, "scores").reshape(-1)
    values = _matrix(values, "values", "a 2-D array (keys, d_v)")
    _check_length("scores", scores, len(tokens))
    _check_length("values", values, len(tokens))
    if d_k <= 0:
        raise _invalid("d_k", "a positive integer", d_k)
    scaled = scores / math.sqrt(d_k)
    weights = _softmax(scaled)
    weighted = weights[:, None] * values  # (n, d_v)
    output = weighted.sum(axis=0)  # (d_v,)
    fig = _new_figure((15.0, 0.9 + 0.32 * max(len(tokens), 6)))
    axes = fig.subplots(1, 5, gridspec_kw={"width_ratios": [1, 1, 1, 1.6, 1.6]})
    positions = np.arange(len(tokens))
    for ax, data, title, color in (
        (axes[0], scores, "1. scores q·k_j", "#7f9cc9"),
        (axes[1], scaled, f"2. scaled: ÷ √{d_k} = {math.sqrt(d_k):.1f}", "#d9a53f"),
        (axes[2], weights, "3. softmax: weights (sum 1)", "#55a868"),
    ):
        ax.barh(positions, data, color=color)
        for p, value in zip(positions, data, strict=True):
            ax.text(value, p, f" {value:.2f}", va="center", fontsize=7,
                    ha="left" if value >= 0 else "right")
        ax.axvline(0, color="#666666", linewidth=0.6)
        ax.set_title(title, fontsize=9)
        _set_token_ticks(ax, tokens, len(tokens), "y")
        ax.invert_yaxis()
        ax.margins(x=0.3)
    limit = max(np.abs(values).max(), 1e-9)
    image = axes[3].imshow(weighted, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    axes[3].set_title("4. weight_j × value_j (one row per key)", fontsize=9)
    _set_token_ticks(axes[3], tokens, len(tokens), "y")
    axes[3].set_xlabel("value dimension")
    axes[4].imshow(np.vstack([values, output[None]]), cmap="RdBu_r", vmin=-limit, vmax=limit,
                   aspect="auto")
    axes[4].axhline(len(tokens) - 0.5, color="black", linewidth=2)
    _set_token_ticks(axes[4], [*tokens, "output = Σ"], len(tokens) + 1, "y")
    axes[4].set_title("5. values, and the output (their weighted sum)", fontsize=9)
    axes[4].set_xlabel("value dimension")
    fig.colorbar(image, ax=axes[3:], shrink=0.8, label="value")
    fig.suptitle(f"Scaled dot-product attention for {query_label}, one step at a time (§3.2.1)")
    return fig


# ------------------------------------------------- additive vs dot-product


def plot_attention_costs(
    d_ks: Sequence[int],
    seconds: Mapping[str, Sequence[float]],
    max_weights: Mapping[str, Sequence[float]],
) -> Figure:
    """Additive against dot-product attention (section 3.2.1): time, and large `d_k`.

    Args:
        d_ks: the depths measured.
        seconds: `{name: seconds per call for each d_k}`, e.g. "dot-product"
            and "additive".
        max_weights: `{name: mean largest softmax weight of a row for each
            d_k}`, e.g. unscaled and scaled dot products and additive scores.

    Returns:
        A figure of two panels: time per call against `d_k`, and how peaked the
        softmax gets against `d_k` (1 is all weight on one key).
    """
    d_ks = [int(d) for d in d_ks]
    fig = _new_figure((11.0, 4.0))
    left, right = fig.subplots(1, 2)
    for panel, series, ylabel in ((left, seconds, "milliseconds per call"),
                                  (right, max_weights, "mean largest weight of a row")):
        for name, ys in series.items():
            ys = _to_numpy(ys, name).reshape(-1)
            _check_length(name, ys, len(d_ks))
            panel.plot(d_ks, ys * (1e3 if panel is left else 1), marker="o", label=name)
        panel.set_xscale("log", base=2)
        panel.set_xlabel("d_k (= hidden width d_a of additive attention)")
        panel.set_ylabel(ylabel)
        panel.grid(alpha=0.3)
        panel.legend(fontsize=8)
    left.set_yscale("log")
    left.set_title("Time of the scores, same queries and keys")
    right.set_ylim(0, 1.05)
    right.set_title("Large d_k: unscaled dot products saturate the softmax")
    fig.suptitle("Additive against dot-product attention (§3.2.1)")
    return fig


# ------------------------------------------- the three uses of attention (3.2.3)


def plot_three_uses(
    source_tokens,
    target_rows,
    target_columns,
    encoder_self,
    decoder_self,
    encoder_decoder,
    description: str = "",
) -> Figure:
    """The three uses of attention of section 3.2.3, side by side, in the paper's order.

    Each panel is one `(queries, keys)` matrix (for example one head, or the
    mean of the heads, of one layer): encoder-decoder attention (queries from
    the decoder, keys from the encoder), encoder self-attention and masked
    decoder self-attention. The look-ahead mask's cells (key after query) of
    the last panel are hatched.

    Args:
        source_tokens: the `n` source tokens.
        target_rows: labels of the `m` decoder query rows.
        target_columns: labels of the `m` decoder positions as keys.
        encoder_self: `(n, n)`.
        decoder_self: `(m, m)`.
        encoder_decoder: `(m, n)`.
        description: what the matrices are (layer, head), for the title.

    Returns:
        The figure.
    """
    source = _as_tokens(source_tokens, "source_tokens")
    rows = _as_tokens(target_rows, "target_rows")
    columns = _as_tokens(target_columns, "target_columns")
    panels = (
        ("encoder-decoder", "1. encoder-decoder attention\nQ: decoder, K = V: encoder output",
         _matrix(encoder_decoder, "encoder_decoder", "a 2-D array"), rows, source),
        ("encoder self", "2. encoder self-attention\nQ = K = V: encoder",
         _matrix(encoder_self, "encoder_self", "a 2-D array"), source, source),
        ("masked decoder self", "3. masked decoder self-attention\nQ = K = V: decoder",
         _matrix(decoder_self, "decoder_self", "a 2-D array"), rows, columns),
    )
    for _, _, matrix, ylabels, xlabels in panels:
        if matrix.shape != (len(ylabels), len(xlabels)):
            raise _invalid("weights", f"shape ({len(ylabels)}, {len(xlabels)})",
                           f"shape {matrix.shape}")
    fig = _new_figure((16.0, 1.6 + 0.34 * max(len(source), len(rows))))
    axes = fig.subplots(1, 3)
    for ax, (kind, title, matrix, ylabels, xlabels) in zip(axes, panels, strict=True):
        image = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=1)
        _set_token_ticks(ax, xlabels, len(xlabels), "x")
        _set_token_ticks(ax, ylabels, len(ylabels), "y")
        ax.set_title(title, fontsize=9.5, backgroundcolor=ATTENTION_COLORS[kind])
        ax.set_xlabel("keys")
        ax.set_ylabel("queries")
        if kind == "masked decoder self":
            for i in range(len(ylabels)):
                for j in range(i + 1, len(xlabels)):
                    ax.add_patch(_hatched(j, i))
    fig.colorbar(image, ax=axes, shrink=0.7, label="attention weight")
    fig.suptitle("The three uses of attention in the model (§3.2.3)"
                 + (f": {description}" if description else ""))
    return fig


def _hatched(x, y):
    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, hatch="///", edgecolor="#bbbbbb",
                     linewidth=0)


# ----------------------------------------------------------- positional encoding


def plot_sinusoids(encoding, dimensions: Sequence[int], num_positions: int | None = None) -> Figure:
    """Columns of the positional encoding (section 3.5) as curves over positions.

    Column `2i` is `sin(pos / 10000^(2i/d_model))` and column `2i + 1` its
    cosine: a sinusoid of wavelength `2 pi 10000^(2i/d_model)` positions.

    Args:
        encoding: `(length, d_model)`, e.g. `transformer.positional_encoding`.
        dimensions: the columns to draw.
        num_positions: positions to draw; all when None.

    Returns:
        The figure, one curve per column, labelled with its wavelength.
    """
    pe = _matrix(encoding, "encoding", "a 2-D array (length, d_model)")
    length, depth = pe.shape
    num_positions = length if num_positions is None else min(int(num_positions), length)
    fig = _new_figure((10.0, 1.2 + 0.9 * len(dimensions)))
    axes = fig.subplots(len(dimensions), 1, sharex=True, squeeze=False)[:, 0]
    for ax, dim in zip(axes, dimensions, strict=True):
        if not 0 <= dim < depth:
            raise _invalid("dimensions", f"columns in [0, {depth})", dim)
        wavelength = 2 * math.pi * 10000 ** ((dim - dim % 2) / depth)
        kind = "sin" if dim % 2 == 0 else "cos"
        ax.plot(np.arange(num_positions), pe[:num_positions, dim], color="#4c72b0")
        ax.set_ylim(-1.15, 1.15)
        ax.set_ylabel(f"dim {dim}", rotation=0, ha="right", va="center", fontsize=8)
        ax.text(1.01, 0.5, f"{kind}, wavelength {wavelength:,.1f}", transform=ax.transAxes,
                fontsize=8, va="center")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("position")
    fig.suptitle(f"Positional encoding by wavelength (§3.5), d_model = {depth}")
    return fig


def plot_position_similarity(encoding, num_positions: int | None = None) -> Figure:
    """How alike the encodings of two positions are (section 3.5).

    Left, the dot product `PE(p) . PE(q)` of every pair of positions; right,
    `PE(p) . PE(p + k)` against the offset `k` for a few starting positions
    `p`: the curves coincide, since the dot product depends only on `k`.

    Args:
        encoding: `(length, d_model)`.
        num_positions: positions to use; all when None.

    Returns:
        The figure.
    """
    pe = _matrix(encoding, "encoding", "a 2-D array (length, d_model)")
    n = pe.shape[0] if num_positions is None else min(int(num_positions), pe.shape[0])
    pe = pe[:n]
    similarity = pe @ pe.T  # (n, n)
    fig = _new_figure((11.0, 4.4))
    left, right = fig.subplots(1, 2)
    image = left.imshow(similarity, cmap="viridis")
    left.set_xlabel("position q")
    left.set_ylabel("position p")
    left.set_title("PE(p) · PE(q)")
    fig.colorbar(image, ax=left, shrink=0.8)
    offsets = np.arange(n // 2)
    for start in (0, n // 8, n // 4, n // 2 - 1):
        right.plot(offsets, [similarity[start, start + k] for k in offsets], label=f"p = {start}")
    right.set_xlabel("offset k")
    right.set_ylabel("PE(p) · PE(p + k)")
    right.set_title("The same curve from every start: it depends on k only")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle("Similarity of positions (§3.5)")
    return fig


def plot_linear_map(matrix, title: str, max_size: int | None = 16) -> Figure:
    """A matrix as a heatmap with a zero-centred colour scale (e.g. the map
    taking `PE(pos)` to `PE(pos + k)`, section 3.5).

    Args:
        matrix: a 2-D array.
        title: the figure's title.
        max_size: draw only the top-left `max_size x max_size` block, or all
            when None.

    Returns:
        The figure.
    """
    array = _matrix(matrix, "matrix", "a 2-D array")
    if max_size is not None:
        array = array[:max_size, :max_size]
    limit = max(np.abs(array).max(), 1e-12)
    fig = _new_figure((6.2, 5.2))
    ax = fig.add_subplot()
    image = ax.imshow(array, cmap="RdBu_r", vmin=-limit, vmax=limit)
    ax.set_xlabel("input dimension")
    ax.set_ylabel("output dimension")
    fig.colorbar(image, ax=ax, shrink=0.8)
    ax.set_title(title, fontsize=10)
    return fig


def plot_shuffled_outputs(tokens, outputs, order: Sequence[int], shuffled_outputs,
                          title: str = "") -> Figure:
    """Self-attention without positions is order-blind: shuffled inputs, shuffled outputs.

    Left, the output rows for the sentence; middle, the output rows for the
    sentence in the order `order`; right, the difference between the middle
    and the left rows taken in that order (zero everywhere when the outputs
    are only permuted).

    Args:
        tokens: the `n` tokens, in the original order.
        outputs: `(n, d)` outputs for the original order.
        order: the permutation: row `i` of the shuffled input is token `order[i]`.
        shuffled_outputs: `(n, d)` outputs for the shuffled input.
        title: the figure's title.

    Returns:
        The figure.
    """
    labels = _as_tokens(tokens, "tokens")
    out = _matrix(outputs, "outputs", "a 2-D array (tokens, d)")
    shuffled = _matrix(shuffled_outputs, "shuffled_outputs", "a 2-D array (tokens, d)")
    order = [int(i) for i in order]
    if sorted(order) != list(range(len(labels))) or out.shape != shuffled.shape:
        raise _invalid("order", f"a permutation of range({len(labels)})", order)
    difference = shuffled - out[order]
    limit = max(np.abs(out).max(), 1e-12)
    fig = _new_figure((15.0, 1.6 + 0.3 * len(labels)))
    axes = fig.subplots(1, 3)
    panels = ((out, labels, "outputs, original order"),
              (shuffled, [labels[i] for i in order], "outputs, shuffled input"),
              (difference, [labels[i] for i in order],
               f"shuffled − original[order]: max |·| = {np.abs(difference).max():.1e}"))
    for ax, (data, ylabels, subtitle) in zip(axes, panels, strict=True):
        image = ax.imshow(data, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        _set_token_ticks(ax, ylabels, len(ylabels), "y")
        ax.set_xlabel("output dimension")
        ax.set_title(subtitle, fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8)
    fig.suptitle(title or "Self-attention without positions: a shuffled input gives shuffled outputs")
    return fig


# ------------------------------------------------------- the model opened up


def plot_matrices(panels: Mapping[str, object], row_labels, title: str,
                  xlabel: str = "feature") -> Figure:
    """Matrices with one row per token, side by side (e.g. a sublayer's input,
    hidden activations and output), each with its own zero-centred colour scale.

    Args:
        panels: `{panel title: (tokens, width) array}`, in the order to draw.
        row_labels: the tokens, one per row of every matrix.
        title: the figure's title.
        xlabel: the label of every x-axis.

    Returns:
        The figure.
    """
    labels = _as_tokens(row_labels, "row_labels")
    if not panels:
        raise _invalid("panels", "a non-empty mapping", "{}")
    arrays = {name: _matrix(value, "panels", "2-D arrays (tokens, width)") for name, value in panels.items()}
    for name, array in arrays.items():
        if len(array) != len(labels):
            raise _invalid("panels", f"{len(labels)} rows, one per token", f"{name!r} with {len(array)}")
    fig = _new_figure((4.6 * len(arrays) + 1.0, 1.6 + 0.3 * len(labels)))
    axes = fig.subplots(1, len(arrays), squeeze=False)[0]
    for ax, (name, array) in zip(axes, arrays.items(), strict=True):
        limit = max(np.abs(array).max(), 1e-12)
        image = ax.imshow(array, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto",
                          interpolation="nearest")
        _set_token_ticks(ax, labels, len(labels), "y")
        ax.set_xlabel(f"{xlabel} ({array.shape[1]})")
        ax.set_title(name, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(title)
    return fig


def plot_layer_checks(differences: Mapping[str, float], tolerance: float = 1e-5) -> Figure:
    """Largest difference between hand-written computations and the library's layers.

    Args:
        differences: `{what was written by hand: max |hand - library|}`.
        tolerance: the bar every difference must stay under, drawn as a line.

    Returns:
        A horizontal bar chart on a log scale.
    """
    if not differences:
        raise _invalid("differences", "a non-empty mapping", "{}")
    names = list(differences)
    values = np.array([max(float(differences[n]), 1e-12) for n in names])
    fig = _new_figure((8.5, 0.8 + 0.42 * len(names)))
    ax = fig.add_subplot()
    colors = ["#55a868" if v < tolerance else "#c44e52" for v in values]
    ax.barh(np.arange(len(names)), values, color=colors)
    ax.set_yticks(np.arange(len(names)), labels=names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(tolerance, color="black", linestyle="--", label=f"tolerance {tolerance:g}")
    for i, value in enumerate(values):
        ax.text(value, i, f" {value:.1e}", va="center", fontsize=8)
    ax.set_xlabel("max |by hand − library| (log scale)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Written by hand in NumPy against the library, on the trained weights")
    return fig


def plot_label_smoothing(vocab_size: int, label_smoothing: float, shown: int = 12) -> Figure:
    """Label smoothing (section 5.4): the target distribution and the loss floor.

    Left, the smoothed target over the first `shown` tokens of the vocabulary
    for a right token at id 4: `1 - eps + eps / V` on it, `eps / V` on every
    other token. Right, the entropy of that target, the lowest label-smoothed
    cross-entropy any model can reach, against `eps`.

    Args:
        vocab_size: `V`.
        label_smoothing: `eps` of the run, marked on the curve.
        shown: tokens drawn on the left.

    Returns:
        The figure.
    """
    if vocab_size < 2:
        raise _invalid("vocab_size", "an integer of at least 2", vocab_size)
    if not 0 <= label_smoothing < 1:
        raise _invalid("label_smoothing", "a number in [0, 1)", label_smoothing)

    def floor(eps):
        right = 1 - eps + eps / vocab_size
        other = eps / vocab_size
        return -(right * np.log(right) + (vocab_size - 1) * (other * np.log(other) if other else 0))

    fig = _new_figure((11.0, 3.8))
    left, right = fig.subplots(1, 2)
    target = np.full(shown, label_smoothing / vocab_size)
    target[4] += 1 - label_smoothing
    left.bar(np.arange(shown), target, color=["#c44e52" if i == 4 else "#4c72b0" for i in range(shown)])
    left.set_yscale("log")
    left.set_ylim(min(target.min(), 1.0) / 3 if label_smoothing else 1e-6, 2.0)
    if label_smoothing:
        left.text(shown - 0.5, target.min() * 1.4, f"every other token: eps / V = {target.min():.1e}",
                  ha="right", fontsize=8)
    left.set_xlabel(f"token id (first {shown} of {vocab_size})")
    left.set_ylabel("target probability (log scale)")
    left.set_title(f"smoothed target, eps = {label_smoothing:g}, right token 4")
    eps = np.linspace(0, 0.3, 61)
    right.plot(eps, [floor(e) for e in eps], color="#4c72b0")
    right.plot([label_smoothing], [floor(label_smoothing)], "o", color="#c44e52",
               label=f"eps = {label_smoothing:g}: floor {floor(label_smoothing):.3f}")
    right.set_xlabel("eps")
    right.set_ylabel("lowest reachable loss (nats)")
    right.set_title(f"the loss floor, V = {vocab_size}")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.suptitle("Label smoothing (§5.4)")
    return fig
