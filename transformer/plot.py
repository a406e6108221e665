"""Figures for studying attention: encodings, masks, schedules and attention weights.

Every function returns a `matplotlib.figure.Figure` and never calls
`plt.show()`. Figures are built with the object API (`matplotlib.figure.Figure`),
never through pyplot, so no global figure state accumulates: the functions work
headless with the Agg backend, in scripts (`fig.savefig(...)`) and in Jupyter,
where a returned figure renders as a PNG when it is the value of a cell.

Conventions shared by all figures:

- Masks follow DESIGN.md's single convention: **1 = masked (attention NOT
  allowed)**, 0 = allowed. The colour bar of every mask plot says so.
- Matrices are drawn with the query position (row `i`) on the y-axis, top to
  bottom, and the key position (column `j`) on the x-axis, left to right, the
  way they are printed. A look-ahead mask therefore shows its 1s in the upper
  right triangle: query `i` cannot see keys `j > i`.
- Tokens may be given as lists of `str` or `bytes` (decoded as UTF-8), numpy
  arrays or TensorFlow string tensors. TensorFlow is never imported here;
  tensors are converted through their `.numpy()` method.

Example:

>>> import numpy as np
>>> from transformer.plot import plot_attention_head
>>> weights = np.full((2, 3), 1 / 3)
>>> fig = plot_attention_head(["o", "gato", "preto"], ["the", "cat"], weights)
>>> fig.savefig("/tmp/head.png")
"""

from __future__ import annotations

import csv
import io
import logging
import math
import numbers
import os
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, ScalarFormatter

from transformer._validation import check_positive_int

logger = logging.getLogger(__name__)

__all__ = [
    "attention_layer_description",
    "dot_product_statistics",
    "plot_attention_head",
    "plot_attention_weights",
    "plot_dot_product_variance",
    "plot_learning_rate",
    "plot_mask",
    "plot_masks",
    "plot_positional_encoding",
    "plot_training_curves",
]

# Colours of the two mask values: light for allowed (0), dark for masked (1).
_MASK_COLORS = ("#f4f4f4", "#2f3b73")
_MASK_LABELS = ("allowed (0)", "masked (1)")
_MASK_CONVENTION = "1 = masked (not allowed), 0 = allowed; rows = queries, columns = keys"
# Masks and attention maps up to this size get their values written in the cells.
_ANNOTATE_MAX_SIZE = 16

# The roles of attention in the model (section 3.2.3), by DESIGN.md weight-dict key.
_LAYER_NAME = re.compile(r"^(encoder|decoder)_layer(\d+)(?:_block([12]))?$")
_ROLES = {
    ("encoder", None): "encoder self-attention",
    ("decoder", "1"): "masked decoder self-attention",
    ("decoder", "2"): "encoder-decoder attention",
}


class _Figure(Figure):
    """A `Figure` that renders itself as a PNG in Jupyter.

    With `%matplotlib inline` active, IPython's own figure formatter takes
    precedence and this method is not used; without it, a bare `Figure` would
    only show its text repr. Nothing else differs from `Figure`.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def _new_figure(figsize: tuple[float, float]) -> Figure:
    return _Figure(figsize=figsize, layout="constrained")


def _invalid(name: str, expected: str, value) -> ValueError:
    return ValueError(
        f"Received an invalid value for argument `{name}`, expected {expected}. "
        f"Received: {name}={value}"
    )


def _to_numpy(value, name: str) -> np.ndarray:
    """Converts a numpy array, nested list or eager tensor to a float64 array."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise _invalid(name, "a numeric array or tensor", f"{type(value).__name__}") from error
    return array


def _shape(array: np.ndarray) -> str:
    return "(" + ", ".join(str(d) for d in array.shape) + ("," if array.ndim == 1 else "") + ")"


def _as_tokens(tokens, name: str) -> list[str] | None:
    """Returns `tokens` as a list of `str`, or None when `tokens` is None."""
    if tokens is None:
        return None
    if hasattr(tokens, "numpy"):
        tokens = tokens.numpy()
    if isinstance(tokens, (str, bytes)):
        raise _invalid(
            name,
            "a sequence of tokens (list of str or bytes, or a string tensor), not a single string",
            repr(tokens if len(tokens) <= 40 else tokens[:40] + "..."),
        )
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise _invalid(name, "a 1-D sequence of tokens", f"an array of shape {_shape(tokens)}")
        tokens = tokens.tolist()
    result = []
    for token in tokens:
        if isinstance(token, (bytes, np.bytes_)):
            result.append(bytes(token).decode("utf-8", errors="replace"))
        else:
            result.append(str(token))
    return result


def _set_token_ticks(ax, tokens: list[str] | None, size: int, axis: str) -> None:
    """Labels the x or y ticks of a matrix plot with tokens, or integer positions."""
    if tokens is not None:
        if axis == "x":
            ax.set_xticks(range(size), labels=tokens, rotation=90)
        else:
            ax.set_yticks(range(size), labels=tokens)
    else:
        locator = MaxNLocator(integer=True, nbins=min(size, 10))
        (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(locator)


def _matrix_figsize(
    num_rows: int,
    num_cols: int,
    row_tokens: list[str] | None = None,
    col_tokens: list[str] | None = None,
    panels: tuple[int, int] = (1, 1),
) -> tuple[float, float]:
    """A figure size that keeps token labels readable in an `nrows x ncols` grid.

    Each panel gets about a third of an inch per matrix cell, plus room for the
    rotated x tick labels and the y tick labels (about 0.09 inch per character).
    """
    cell = 0.32
    char = 0.09
    label_height = char * max((len(t) for t in col_tokens), default=2) if col_tokens else 0.3
    label_width = char * max((len(t) for t in row_tokens), default=2) if row_tokens else 0.3
    width = min(max(2.4, cell * num_cols), 8.0) + label_width + 0.7
    height = min(max(2.0, cell * num_rows), 8.0) + label_height + 0.9
    prows, pcols = panels
    return (min(width * pcols + 1.2, 24.0), min(height * prows + 0.5, 18.0))


# ---------------------------------------------------------------- positional encoding


def plot_positional_encoding(
    encoding, depth: int | None = None, *, title: str | None = None, figsize=None
) -> Figure:
    """Plots the sinusoidal positional encoding as a heatmap (section 3.5).

    Position runs up the y-axis and the encoding dimension along the x-axis, as
    in the tutorial's figure: low dimensions oscillate fast along the positions,
    high dimensions slowly.

    Args:
        encoding: the encoding, an array of shape `(length, depth)` (leading
            axes of size 1, as in the tutorial's `(1, length, depth)`, are
            dropped); or the integer `length` together with `depth`; or a
            `(length, depth)` tuple of two integers. Given integers, the
            encoding is computed with `transformer.positional.positional_encoding`.
        depth: the encoding width when `encoding` is an integer length.
        title: figure title; by default it names the section and the shape.
        figsize: matplotlib figure size in inches.

    Returns:
        A `Figure` with one heatmap axes and its colour bar.

    Example:

    >>> fig = plot_positional_encoding(2048, 512)   # the tutorial's figure
    """
    if depth is not None or _is_int_pair(encoding):
        if depth is None:
            encoding, depth = encoding
        check_positive_int("encoding", encoding)
        check_positive_int("depth", depth)
        # Imported lazily: positional.py imports TensorFlow and Keras.
        from transformer.positional import positional_encoding

        array = np.asarray(positional_encoding(int(encoding), int(depth)), dtype=np.float64)
    else:
        array = _to_numpy(encoding, "encoding")
        while array.ndim > 2 and array.shape[0] == 1:
            array = array[0]
        if array.ndim != 2:
            raise _invalid(
                "encoding",
                "an array of shape (length, depth), or integers length and depth",
                f"an array of shape {_shape(array)}",
            )
    length, width = array.shape
    fig = _new_figure(figsize or (9.0, 5.0))
    ax = fig.add_subplot()
    image = ax.imshow(
        array,
        cmap="RdBu",
        vmin=-1.0,
        vmax=1.0,
        origin="lower",
        aspect="auto",
        interpolation="antialiased",  # long encodings are downsampled, avoid moire
    )
    ax.set_xlabel("Depth (encoding dimension)")
    ax.set_ylabel("Position")
    ax.set_title(
        title
        or f"Positional encoding (section 3.5): length={length}, depth={width}\n"
        "even dims sin(pos / 10000^(2i/d)), odd dims cos(...)"
    )
    colorbar = fig.colorbar(image, ax=ax)
    colorbar.set_label("PE[pos, dim]")
    return fig


def _is_int_pair(value) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
    )


# ---------------------------------------------------------------------------- masks


def _mask_to_2d(mask, name: str, batch_index: int, num_queries: int | None) -> np.ndarray:
    """Reduces a broadcastable mask to the `(seq_q, seq_k)` matrix to draw.

    Accepted shapes: `(seq_k,)`, `(seq_q, seq_k)`, `(batch, seq_q, seq_k)` and
    `(batch, heads, seq_q, seq_k)`, any of whose leading axes may be 1 as
    broadcasting allows (`(batch, 1, 1, seq)` padding masks, `(1, 1, seq, seq)`
    look-ahead masks). Batch element `batch_index` is selected (element 0 when
    the batch axis has size 1) and head 0. A single query row, as in a padding
    mask, is repeated to `num_queries` rows (default `seq_k`): the mask applies
    to every query alike.
    """
    array = _to_numpy(mask, name)
    if array.ndim == 0 or array.ndim > 4:
        raise _invalid(
            name,
            "a mask of shape (seq_q, seq_k), (batch, seq_q, seq_k) or (batch, heads, seq_q, seq_k)",
            f"an array of shape {_shape(array)}",
        )
    if array.ndim == 1:
        array = array[np.newaxis, :]  # (1, seq_k)
    if array.ndim >= 3:
        batch = array.shape[0]
        if batch > 1 and not 0 <= batch_index < batch:
            raise _invalid("batch_index", f"an index into the batch of {batch}", batch_index)
        array = array[batch_index if batch > 1 else 0]
    if array.ndim == 3:
        array = array[0]  # head 0; DESIGN.md masks have a heads axis of 1.
    values = np.unique(array)
    if not np.all(np.isin(values, (0.0, 1.0))):
        raise _invalid(
            name,
            "a mask of 0s and 1s (1 = masked, not allowed). An additive mask "
            "(0 / -1e9) or a Keras `attention_mask` (True = allowed) must be converted "
            "first",
            f"an array holding values {values[:6].tolist()}",
        )
    rows = num_queries if num_queries is not None else array.shape[1]
    if array.shape[0] == 1 and rows != 1:
        array = np.repeat(array, rows, axis=0)  # (rows, seq_k)
    return array


def _draw_mask(
    ax,
    mask: np.ndarray,
    title: str | None,
    key_tokens: list[str] | None,
    query_tokens: list[str] | None,
    annotate: bool | None,
):
    num_q, num_k = mask.shape
    cmap = ListedColormap(list(_MASK_COLORS))
    norm = BoundaryNorm([-0.5, 0.5, 1.5], cmap.N)
    image = ax.imshow(mask, cmap=cmap, norm=norm, origin="upper", interpolation="nearest")
    if annotate is None:
        annotate = max(num_q, num_k) <= _ANNOTATE_MAX_SIZE
    if annotate:
        for i in range(num_q):
            for j in range(num_k):
                value = int(mask[i, j])
                ax.text(
                    j,
                    i,
                    str(value),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if value else "#555555",
                )
    # Thin grid lines between the cells.
    ax.set_xticks(np.arange(-0.5, num_k, 1.0), minor=True)
    ax.set_yticks(np.arange(-0.5, num_q, 1.0), minor=True)
    ax.grid(which="minor", color="#bbbbbb", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    _set_token_ticks(ax, key_tokens, num_k, "x")
    _set_token_ticks(ax, query_tokens, num_q, "y")
    ax.set_xlabel("key position j" if key_tokens is None else "key token (j)")
    ax.set_ylabel("query position i" if query_tokens is None else "query token (i)")
    if title:
        ax.set_title(title)
    return image


def _mask_colorbar(fig, image, axes):
    colorbar = fig.colorbar(image, ax=axes, ticks=[0, 1], shrink=0.8)
    colorbar.ax.set_yticklabels(list(_MASK_LABELS))
    return colorbar


def _check_token_count(tokens: list[str] | None, size: int, name: str, what: str) -> None:
    if tokens is not None and len(tokens) != size:
        raise ValueError(
            f"Received {len(tokens)} `{name}` for a mask with {size} {what}; "
            f"expected {size} tokens."
        )


def plot_mask(
    mask,
    title: str | None = None,
    tokens=None,
    *,
    query_tokens=None,
    batch_index: int = 0,
    annotate: bool | None = None,
    ax=None,
    figsize=None,
) -> Figure:
    """Plots one attention mask (section 3.2.3 and DESIGN.md decision 3).

    The convention is DESIGN.md's: **1 = masked (attention NOT allowed)**,
    0 = allowed, stated on the colour bar. Rows are query positions `i`
    (top to bottom), columns are key positions `j` (left to right), so a
    look-ahead mask shows 1s above the diagonal.

    Args:
        mask: a mask of shape `(seq_q, seq_k)`, or broadcastable shapes:
            `(seq_k,)`, `(batch, seq_q, seq_k)`, `(batch, heads, seq_q, seq_k)`
            such as the `(batch, 1, 1, seq)` padding mask or a `(1, 1, seq, seq)`
            look-ahead mask. Batch element `batch_index` and head 0 are drawn. A
            mask with a single query row (a padding mask) is repeated to one row
            per query, `len(query_tokens)` rows if given, else `seq_k` rows (a
            square, as in self-attention): every query sees the same keys.
            Values must be 0/1 or booleans.
        title: axes title, e.g. "look-ahead mask".
        tokens: key tokens, labelling the x-axis; also the query tokens on the
            y-axis unless `query_tokens` is given (self-attention).
        query_tokens: query tokens for the y-axis when they differ from the keys
            (encoder-decoder attention).
        batch_index: which batch element of a batched mask to draw.
        annotate: write 0/1 in each cell; by default when the mask has at most
            16 rows and columns.
        ax: an existing matplotlib axes to draw into; a colour bar is added next
            to it. By default a new figure is created.
        figsize: figure size in inches when a new figure is created.

    Returns:
        The `Figure`: one mask axes and one colour bar axes.

    Example:

    >>> from transformer.masking import create_look_ahead_mask
    >>> fig = plot_mask(create_look_ahead_mask(5), "look-ahead mask")
    """
    key_tokens = _as_tokens(tokens, "tokens")
    q_tokens = _as_tokens(query_tokens, "query_tokens")
    if q_tokens is None:
        q_tokens = key_tokens
    array = _mask_to_2d(mask, "mask", batch_index, None if q_tokens is None else len(q_tokens))
    _check_token_count(key_tokens, array.shape[1], "tokens", "keys (columns)")
    _check_token_count(q_tokens, array.shape[0], "query_tokens", "queries (rows)")
    if ax is None:
        fig = _new_figure(figsize or _matrix_figsize(*array.shape, q_tokens, key_tokens))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    image = _draw_mask(ax, array, title or "mask", key_tokens, q_tokens, annotate)
    _mask_colorbar(fig, image, ax)
    return fig


def plot_masks(
    padding_mask=None,
    look_ahead_mask=None,
    combined_mask=None,
    tokens=None,
    *,
    batch_index: int = 0,
    annotate: bool | None = None,
    figsize=None,
) -> Figure:
    """Plots the decoder's masks side by side: padding, look-ahead and combined.

    Each panel follows `plot_mask`: 1 = masked (NOT allowed), rows are queries,
    columns keys. The padding mask `(batch, 1, 1, seq)` is drawn repeated over
    every query row, so it reads like the other two. The combined mask is
    `maximum(padding, look_ahead)`: a key is hidden when it is padding *or* in
    the future.

    Args:
        padding_mask: from `create_padding_mask`, `(batch, 1, 1, seq)`.
        look_ahead_mask: from `create_look_ahead_mask`, `(seq, seq)`.
        combined_mask: the decoder's self-attention mask, `(batch, 1, seq, seq)`.
        tokens: the sequence's tokens, labelling both axes of every panel.
        batch_index: which batch element to draw.
        annotate: write 0/1 in each cell (default: masks up to 16 x 16).
        figsize: figure size in inches.

    Any mask may be None to leave its panel out; at least one is required.

    Returns:
        A `Figure` with one axes per given mask plus one shared colour bar.

    Example:

    >>> from transformer.masking import create_padding_mask, create_look_ahead_mask
    >>> tar = tf.constant([[2, 7, 9, 3, 0, 0]])
    >>> fig = plot_masks(create_padding_mask(tar), create_look_ahead_mask(6))
    """
    token_list = _as_tokens(tokens, "tokens")
    panels = [
        (padding_mask, "padding_mask", "padding mask"),
        (look_ahead_mask, "look_ahead_mask", "look-ahead mask"),
        (combined_mask, "combined_mask", "combined mask\nmax(padding, look-ahead)"),
    ]
    panels = [panel for panel in panels if panel[0] is not None]
    if not panels:
        raise ValueError(
            "Received no mask: pass at least one of `padding_mask`, `look_ahead_mask` "
            "and `combined_mask`."
        )
    arrays = []
    num_queries = len(token_list) if token_list is not None else None
    for mask, name, _ in panels:
        # A padding row is repeated to one row per token, or to a square.
        array = _mask_to_2d(mask, name, batch_index, num_queries)
        _check_token_count(token_list, array.shape[1], "tokens", f"keys in `{name}`")
        arrays.append(array)
    fig = _new_figure(
        figsize
        or _matrix_figsize(*arrays[0].shape, token_list, token_list, panels=(1, len(arrays)))
    )
    axes = fig.subplots(1, len(arrays), squeeze=False)[0]
    image = None
    for ax, array, (_, _, title) in zip(axes, arrays, panels, strict=True):
        image = _draw_mask(ax, array, title, token_list, token_list, annotate)
    _mask_colorbar(fig, image, list(axes))
    fig.suptitle(_MASK_CONVENTION)
    return fig


# -------------------------------------------------------------------- learning rate


def _evaluate_schedule(schedule: Callable, num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Evaluates `schedule` on float steps 1..num_steps; vectorised when it allows."""
    steps = np.arange(1, num_steps + 1, dtype=np.float32)
    try:
        values = _to_numpy(schedule(steps), "schedule(step)")
        if values.shape == steps.shape:
            return steps, values
        logger.debug("schedule returned shape %s for %d steps", values.shape, num_steps)
    except Exception as error:  # noqa: BLE001 - some schedules only accept scalars.
        logger.debug("schedule is not vectorised (%s); evaluating step by step", error)
    # Scalar schedules: at most 1000 evenly spaced steps, plus the warmup peak.
    samples = np.unique(np.linspace(1, num_steps, min(num_steps, 1000)).round())
    warmup = getattr(schedule, "warmup_steps", None)
    if isinstance(warmup, numbers.Real) and 1 <= warmup <= num_steps:
        samples = np.unique(np.append(samples, float(warmup)))
    samples = samples.astype(np.float32)
    values = np.array([float(_to_numpy(schedule(step), "schedule(step)")) for step in samples])
    return samples, values


def plot_learning_rate(
    schedule: Callable, num_steps: int = 40000, *, title: str | None = None, figsize=None
) -> Figure:
    """Plots a learning-rate schedule against the training step (section 5.3).

    For the paper's schedule, `d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`,
    the rate rises linearly for `warmup_steps` steps, then decays as the inverse
    square root of the step. When the schedule has a `warmup_steps` attribute,
    its peak is marked.

    Args:
        schedule: a callable from a float step to the learning rate, such as a
            `keras.optimizers.schedules.LearningRateSchedule` (e.g. the project's
            `CustomSchedule(d_model, warmup_steps)`). It is called once on a
            float32 array of steps `1, 2, ..., num_steps` (step 0 would divide by
            zero); a schedule that only accepts scalars is called on 1000 evenly
            spaced steps instead.
        num_steps: the last step to plot, a positive integer.
        title: axes title; by default it names the schedule's `d_model` and
            `warmup_steps` when it has them.
        figsize: figure size in inches.

    Returns:
        A `Figure` with one axes.

    Example:

    >>> from transformer.training import CustomSchedule
    >>> fig = plot_learning_rate(CustomSchedule(d_model=128), num_steps=40000)
    """
    if not callable(schedule):
        raise _invalid("schedule", "a callable step -> learning rate", repr(schedule))
    check_positive_int("num_steps", num_steps)
    steps, values = _evaluate_schedule(schedule, int(num_steps))
    fig = _new_figure(figsize or (7.0, 4.2))
    ax = fig.add_subplot()
    ax.plot(steps, values, color="C0", linewidth=1.6, label="learning rate")
    ax.set_xlabel("Train step")
    ax.set_ylabel("Learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    ax.grid(alpha=0.3)
    details = []
    d_model = getattr(schedule, "d_model", None)
    if d_model is not None:
        details.append(f"d_model={_plain_number(d_model)}")
    warmup = getattr(schedule, "warmup_steps", None)
    warmup = _plain_number(warmup) if warmup is not None else None
    if warmup is not None:
        details.append(f"warmup_steps={warmup}")
        if isinstance(warmup, numbers.Real) and 1 <= warmup <= num_steps:
            peak = float(_to_numpy(schedule(np.float32(warmup)), "schedule(step)"))
            ax.axvline(warmup, color="C3", linestyle="--", linewidth=1.0)
            ax.plot([warmup], [peak], "o", color="C3", label=f"peak at step {warmup}: {peak:.2e}")
            ax.legend(loc="upper right")
    name = type(schedule).__name__
    default_title = f"{name}({', '.join(details)})" if details else f"{name} learning rate"
    ax.set_title(title or default_title)
    return fig


def _plain_number(value):
    """A schedule attribute (maybe a 0-d tensor or numpy scalar) as an int or float."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    value = np.asarray(value).item() if isinstance(value, (np.ndarray, np.generic)) else value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# ------------------------------------------------------------------------ attention


def attention_layer_description(layer_name: str | None) -> str:
    """Names the role (section 3.2.3) of a DESIGN.md attention-weights key.

    Args:
        layer_name: a key of the Transformer's weights dict: `encoder_layer{i}`,
            `decoder_layer{i}_block1` or `decoder_layer{i}_block2`.

    Returns:
        For example `"decoder_layer4_block2 (encoder-decoder attention)"`; an
        unrecognised name is returned unchanged, None gives "attention weights".

    Example:

    >>> attention_layer_description("encoder_layer1")
    'encoder_layer1 (encoder self-attention)'
    """
    if layer_name is None:
        return "attention weights"
    match = _LAYER_NAME.match(layer_name)
    if match is None:
        return layer_name
    stack, _, block = match.groups()
    role = _ROLES.get((stack, block))
    return f"{layer_name} ({role})" if role else layer_name


def _check_weights(weights: np.ndarray, in_tokens, out_tokens, name: str) -> None:
    """Checks a `(seq_q, seq_k)` weight matrix against the token counts."""
    expected_q = len(out_tokens) if out_tokens is not None else weights.shape[0]
    expected_k = len(in_tokens) if in_tokens is not None else weights.shape[1]
    if weights.shape != (expected_q, expected_k):
        raise ValueError(
            f"Received `{name}` of shape {_shape(weights)} (queries, keys) that does not "
            f"match the tokens: {expected_q} `out_tokens` (rows, queries) and "
            f"{expected_k} `in_tokens` (columns, keys); expected shape "
            f"({expected_q}, {expected_k})."
        )


def _draw_attention(ax, weights, in_tokens, out_tokens, vmax, axis_labels=(True, True)):
    num_q, num_k = weights.shape
    image = ax.imshow(
        weights, cmap="viridis", vmin=0.0, vmax=vmax, origin="upper", interpolation="nearest"
    )
    _set_token_ticks(ax, in_tokens, num_k, "x")
    _set_token_ticks(ax, out_tokens, num_q, "y")
    if axis_labels[0]:
        ax.set_xlabel("input tokens (keys)" if in_tokens is not None else "key position")
    if axis_labels[1]:
        ax.set_ylabel("output tokens (queries)" if out_tokens is not None else "query position")
    return image


def plot_attention_head(
    in_tokens,
    out_tokens,
    weights,
    ax=None,
    *,
    title: str | None = None,
    colorbar: bool | None = None,
    figsize=None,
) -> Figure:
    """Plots the attention weights of one head, as in the tutorial.

    Row `i` holds the softmax weights that output (query) token `i` gives to
    each input (key) token (section 3.2.1); every row sums to 1.

    Args:
        in_tokens: the key tokens, labelling the x-axis (rotated); for
            encoder-decoder attention, the source sentence. None for positions.
        out_tokens: the query tokens, labelling the y-axis; for the decoder,
            the tokens whose predictions the rows produce. None for positions.
        weights: the head's weights, shape `(len(out_tokens), len(in_tokens))`;
            leading axes of size 1 are dropped.
        ax: an existing axes to draw into; the figure is then `ax.figure`.
        title: axes title.
        colorbar: add a colour bar; by default only when a new figure is made.
        figsize: figure size in inches when a new figure is created.

    Returns:
        The `Figure`: the head's axes, plus a colour bar axes when `colorbar`.

    Raises:
        ValueError: when the shape of `weights` does not match the token counts.

    Example:

    >>> # weights["decoder_layer4_block2"]: (batch, heads, len(out), len(in))
    >>> head = weights["decoder_layer4_block2"][0, 0]
    >>> fig = plot_attention_head(in_tokens, out_tokens, head)
    """
    in_list = _as_tokens(in_tokens, "in_tokens")
    out_list = _as_tokens(out_tokens, "out_tokens")
    array = _to_numpy(weights, "weights")
    while array.ndim > 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2:
        raise _invalid(
            "weights",
            "one head's weights of shape (len(out_tokens), len(in_tokens))",
            f"an array of shape {_shape(array)}",
        )
    _check_weights(array, in_list, out_list, "weights")
    if ax is None:
        fig = _new_figure(figsize or _matrix_figsize(*array.shape, out_list, in_list))
        ax = fig.add_subplot()
        if colorbar is None:
            colorbar = True
    else:
        fig = ax.figure
    image = _draw_attention(ax, array, in_list, out_list, vmax=None)
    if title:
        ax.set_title(title)
    if colorbar:
        fig.colorbar(image, ax=ax, shrink=0.8).set_label("attention weight")
    return fig


def plot_attention_weights(
    in_tokens,
    out_tokens,
    attention,
    layer_name: str | None = None,
    *,
    batch_index: int = 0,
    nrows: int | None = None,
    figsize=None,
) -> Figure:
    """Plots every head of one attention layer and block in a grid (section 3.2.2).

    Each head is titled "Head i" (counting from 1) and the figure names the
    layer and its role (section 3.2.3), e.g.
    "decoder_layer4_block2 (encoder-decoder attention)". All heads share one
    colour scale, from 0 to the largest weight of the layer, so heads can be
    compared; a single colour bar shows it.

    Args:
        in_tokens: key tokens (x-axis of every head). For encoder self-attention
            and encoder-decoder attention, the source tokens; for masked decoder
            self-attention, the decoder's input tokens.
        out_tokens: query tokens (y-axis of every head).
        attention: the layer's weights, shape `(num_heads, seq_q, seq_k)` or
            `(batch, num_heads, seq_q, seq_k)` (element `batch_index` is drawn);
            or the Transformer's whole weights dict, from which `layer_name`
            is taken.
        layer_name: the weights-dict key: `encoder_layer{i}`,
            `decoder_layer{i}_block1` (masked decoder self-attention) or
            `decoder_layer{i}_block2` (encoder-decoder attention).
        batch_index: which batch element to draw from 4-D weights.
        nrows: rows of the grid; by default 1 for up to 3 heads, else 2 (the
            tutorial's 2 x 4 grid for 8 heads).
        figsize: figure size in inches.

    Returns:
        A `Figure` with one axes per head and one colour bar axes.

    Raises:
        ValueError: on a shape that does not match the tokens, or a
            `layer_name` missing from a weights dict.

    Example:

    >>> fig = plot_attention_weights(
    ...     in_tokens, out_tokens, weights["decoder_layer4_block2"][0],
    ...     layer_name="decoder_layer4_block2")
    """
    if isinstance(attention, Mapping):
        if layer_name not in attention:
            raise _invalid(
                "layer_name",
                f"one of the keys of `attention`: {sorted(attention)}",
                repr(layer_name),
            )
        attention = attention[layer_name]
    in_list = _as_tokens(in_tokens, "in_tokens")
    out_list = _as_tokens(out_tokens, "out_tokens")
    array = _to_numpy(attention, "attention")
    if array.ndim == 4:
        batch = array.shape[0]
        if not 0 <= batch_index < batch:
            raise _invalid("batch_index", f"an index into the batch of {batch}", batch_index)
        array = array[batch_index]  # (num_heads, seq_q, seq_k)
    if array.ndim != 3:
        raise _invalid(
            "attention",
            "weights of shape (num_heads, seq_q, seq_k) or (batch, num_heads, seq_q, seq_k)",
            f"an array of shape {_shape(array)}",
        )
    num_heads = array.shape[0]
    _check_weights(array[0], in_list, out_list, "attention[head]")
    if nrows is None:
        nrows = 1 if num_heads <= 3 else 2
    check_positive_int("nrows", nrows)
    nrows = min(nrows, num_heads)
    ncols = math.ceil(num_heads / nrows)
    fig = _new_figure(
        figsize or _matrix_figsize(*array.shape[1:], out_list, in_list, panels=(nrows, ncols))
    )
    grid = fig.subplots(nrows, ncols, squeeze=False)
    vmax = float(array.max()) if array.size else 1.0
    image = None
    head_axes = []
    for head in range(nrows * ncols):
        ax = grid[head // ncols][head % ncols]
        if head >= num_heads:
            fig.delaxes(ax)
            continue
        # Axis captions only on the outer edge of the grid; tokens on every head.
        last_in_column = head + ncols >= num_heads
        first_in_row = head % ncols == 0
        image = _draw_attention(
            ax,
            array[head],
            in_list,
            out_list,
            vmax=vmax,
            axis_labels=(last_in_column, first_in_row),
        )
        ax.set_title(f"Head {head + 1}")
        head_axes.append(ax)
    fig.colorbar(image, ax=head_axes, shrink=0.8).set_label("attention weight")
    fig.suptitle(attention_layer_description(layer_name))
    return fig


# ------------------------------------------------------------------ training curves


def _read_history_csv(path: str) -> dict[str, list[float]]:
    """Reads a CSV training log (Keras `CSVLogger` format) into columns of floats."""
    with open(path, newline="", encoding="utf-8") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        if not header:
            raise ValueError(f"{path}:1: expected a header row of column names; the file is empty.")
        columns: dict[str, list[float]] = {name.strip(): [] for name in header}
        names = list(columns)
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) != len(names):
                raise ValueError(
                    f"{path}:{line}: expected {len(names)} values ({', '.join(names)}); "
                    f"received {len(row)}."
                )
            for name, text in zip(names, row, strict=True):
                text = text.strip()
                try:
                    columns[name].append(float(text) if text else math.nan)
                except ValueError:
                    raise ValueError(
                        f"{path}:{line}: column `{name}` holds {text!r}, expected a number."
                    ) from None
    return columns


def _history_columns(history) -> dict[str, np.ndarray]:
    if isinstance(history, (str, os.PathLike)):
        raw = _read_history_csv(os.fspath(history))
    elif isinstance(history, Mapping):
        raw = history
    elif isinstance(getattr(history, "history", None), Mapping):
        raw = history.history  # a keras.callbacks.History
    else:
        raise _invalid(
            "history",
            "a dict of lists, a keras History or the path of a CSV log",
            type(history).__name__,
        )
    columns = {}
    for name, values in raw.items():
        array = _to_numpy(values, f"history[{name!r}]").reshape(-1)
        columns[str(name)] = array
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"Received `history` columns of different lengths: {lengths}; every metric "
            "needs one value per epoch."
        )
    return columns


def _panel_of(name: str) -> str | None:
    base = name[4:] if name.startswith("val_") else name
    if base in ("learning_rate", "lr"):
        return "learning rate"
    if base.endswith("loss"):
        return "loss"
    if "accuracy" in base or base == "acc":
        return "accuracy"
    return None


def plot_training_curves(history, *, title: str | None = None, figsize=None) -> Figure:
    """Plots loss and accuracy per epoch, for training and validation.

    Args:
        history: a dict of per-epoch lists (`keras.callbacks.History.history`),
            a `History` itself, or the path of a CSV log with a header row
            (Keras's `CSVLogger` format) with columns among `epoch`, `loss`,
            `masked_accuracy`, `val_loss`, `val_masked_accuracy`, `learning_rate`.
            Columns ending in `loss` share the loss panel, columns containing
            `accuracy` the accuracy panel, and `learning_rate` (or `lr`) gets a
            third panel; other columns are ignored. The x-axis is the `epoch`
            column as written (CSVLogger counts from 0), else 1, 2, ...
        title: figure title.
        figsize: figure size in inches.

    Returns:
        A `Figure` with one axes per panel present (loss, accuracy, learning
        rate), in that order.

    Raises:
        ValueError: when no column can be plotted, columns differ in length, or
            a CSV cell is not a number (naming the file and line).

    Example:

    >>> history = model.fit(train_batches, epochs=20, validation_data=val_batches)
    >>> fig = plot_training_curves(history.history)
    """
    columns = _history_columns(history)
    epochs = columns.pop("epoch", None)
    panels: dict[str, list[str]] = {"loss": [], "accuracy": [], "learning rate": []}
    for name in columns:
        panel = _panel_of(name)
        if panel is None:
            logger.debug("plot_training_curves ignores column %r", name)
        else:
            panels[panel].append(name)
    panels = {panel: names for panel, names in panels.items() if names}
    if not panels:
        raise _invalid(
            "history",
            "columns such as loss, masked_accuracy, val_loss, val_masked_accuracy or learning_rate",
            f"columns {sorted(columns) + (['epoch'] if epochs is not None else [])}",
        )
    num_epochs = len(next(iter(columns.values())))
    x = epochs if epochs is not None else np.arange(1, num_epochs + 1)
    fig = _new_figure(figsize or (4.6 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    marker = "o" if num_epochs <= 30 else None
    for ax, (panel, names) in zip(axes, panels.items(), strict=True):
        for name in sorted(names, key=lambda n: (n.startswith("val_"), n)):
            validation = name.startswith("val_")
            ax.plot(
                x,
                columns[name],
                marker=marker,
                markersize=3,
                linestyle="--" if validation else "-",
                color="C1" if validation else "C0",
                label=name,
            )
        ax.set_xlabel("epoch")
        ax.set_ylabel(panel)
        ax.set_title(panel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
        if panel == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    if title:
        fig.suptitle(title)
    return fig


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
    >>> stats["variance_unscaled"].round()   # about d_k
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
            shifted = scaled - scaled.max(axis=-1, keepdims=True)
            weights = np.exp(shifted)
            weights /= weights.sum(axis=-1, keepdims=True)  # (num_samples, num_keys)
            entropy = -np.sum(weights * np.log(np.clip(weights, 1e-300, None)), axis=-1)
            stats[f"variance_{suffix}"].append(float(scaled.var()))
            stats[f"max_weight_{suffix}"].append(float(weights.max(axis=-1).mean()))
            stats[f"entropy_{suffix}"].append(float(entropy.mean()))
    result = {"d_k": np.asarray(d_ks, dtype=np.float64)}
    result.update({key: np.asarray(values) for key, values in stats.items()})
    return result


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

    >>> fig = plot_dot_product_variance()
    """
    stats = dot_product_statistics(d_ks, num_samples=num_samples, num_keys=num_keys, seed=seed)
    d = stats["d_k"]
    fig = _new_figure(figsize or (13.0, 4.0))
    axes = fig.subplots(1, 3)
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
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Why divide by sqrt(d_k) (section 3.2.1): q, k ~ N(0, 1), seed {seed}; "
        "dotted line: the paper's d_k = 64"
    )
    return fig
