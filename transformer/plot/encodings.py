"""Figures of what the model adds to its inputs: the positional encoding and the masks.

The positional encoding of section 3.5 and the attention masks of section
3.2.3, in the convention of docs/design.md ("Masks": 1 = may not attend).
"""

from __future__ import annotations

import numbers

import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure

from transformer._validation import check_positive_int
from transformer.plot._figure import (
    _ANNOTATE_MAX_SIZE,
    _MASK_COLORS,
    _MASK_LABELS,
    _as_tokens,
    _invalid,
    _matrix,
    _matrix_figsize,
    _new_figure,
    _set_token_ticks,
    _shape,
    _to_numpy,
)

__all__ = ["plot_mask", "plot_masks", "plot_positional_encoding"]

_MASK_CONVENTION = "1 = masked (not allowed), 0 = allowed; rows = queries, columns = keys"


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
            encoding is computed here, as `transformer.positional.positional_encoding`
            computes it.
        depth: the encoding width when `encoding` is an integer length.
        title: figure title; by default it names the section and the shape.
        figsize: matplotlib figure size in inches.

    Returns:
        A `Figure` with one heatmap axes and its colour bar.

    Example:

    >>> fig = plot_positional_encoding(2048, 512)   # the tutorial's figure
    """
    array = _encoding_array(encoding, depth)
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


def _encoding_array(encoding, depth: int | None) -> np.ndarray:
    """The `(length, depth)` encoding to draw: given, or computed from two integers."""
    if depth is not None or _is_int_pair(encoding):
        if depth is None:
            encoding, depth = encoding
        check_positive_int("encoding", encoding)
        check_positive_int("depth", depth)
        return _sinusoidal_encoding(int(encoding), int(depth))
    return _matrix(
        encoding, "encoding", "an array of shape (length, depth), or integers length and depth"
    )


def _sinusoidal_encoding(length: int, depth: int) -> np.ndarray:
    """Section 3.5's encoding, `(length, depth)`: `sin(pos / 10000^(2i/depth))` in
    column 2i, `cos` of the same angle in column 2i+1.

    The numbers of `transformer.positional.positional_encoding` (the plot tests
    compare them), computed here because that module imports TensorFlow, which
    this package never does (`translate.py --help` stays quick).
    """
    positions = np.arange(length, dtype=np.float64)[:, np.newaxis]  # (length, 1)
    pair_index = np.arange(depth)[np.newaxis, :] // 2  # (1, depth): i of columns 2i, 2i+1
    angles = positions / np.power(10000.0, 2 * pair_index / depth)  # (length, depth)
    return np.where(np.arange(depth) % 2 == 0, np.sin(angles), np.cos(angles))


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
        array = array[0]  # head 0; the project's masks have a heads axis of 1.
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
    """Plots one attention mask (section 3.2.3; docs/design.md, "Masks").

    The convention is that of docs/design.md: **1 = masked (attention NOT allowed)**,
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
    >>> tokens = ["[START]", "the", "cat", "eats", "[END]"]
    >>> fig = plot_mask(create_look_ahead_mask(5), "look-ahead mask", tokens)
    >>> len(fig.axes)  # the mask and its colour bar
    2
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

    >>> import numpy as np
    >>> from transformer.masking import create_look_ahead_mask, create_padding_mask
    >>> target = np.array([[2, 7, 9, 3, 0, 0]])  # [START] the cat [END] [PAD] [PAD]
    >>> fig = plot_masks(create_padding_mask(target), create_look_ahead_mask(6))
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
