"""Figures of attention weights: one head, every head of a layer (section 3.2.2),
named by their role in the model (section 3.2.3)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

from transformer._validation import check_positive_int
from transformer.plot._figure import (
    _as_tokens,
    _invalid,
    _matrix_figsize,
    _new_figure,
    _set_token_ticks,
    _shape,
    _to_numpy,
)

__all__ = ["attention_layer_description", "plot_attention_head", "plot_attention_weights"]

# The roles of attention in the model (section 3.2.3), by DESIGN.md weight-dict key.
_LAYER_NAME = re.compile(r"^(encoder|decoder)_layer(\d+)(?:_block([12]))?$")
_ROLES = {
    ("encoder", None): "encoder self-attention",
    ("decoder", "1"): "masked decoder self-attention",
    ("decoder", "2"): "encoder-decoder attention",
}


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
    array = _heads_of(attention, "attention", batch_index)  # (num_heads, seq_q, seq_k)
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
    image, head_axes = _draw_head_grid(fig, array, in_list, out_list, nrows, ncols)
    fig.colorbar(image, ax=head_axes, shrink=0.8).set_label("attention weight")
    fig.suptitle(attention_layer_description(layer_name))
    return fig


def _heads_of(weights, name: str, batch_index: int) -> np.ndarray:
    """One sentence's `(num_heads, seq_q, seq_k)` weights from 3-D or 4-D `weights`.

    4-D weights `(batch, num_heads, seq_q, seq_k)` give batch element `batch_index`.
    """
    array = _to_numpy(weights, name)
    if array.ndim == 4:
        batch = array.shape[0]
        if not 0 <= batch_index < batch:
            raise _invalid("batch_index", f"an index into the batch of {batch}", batch_index)
        array = array[batch_index]  # (num_heads, seq_q, seq_k)
    if array.ndim != 3:
        raise _invalid(
            name,
            "weights of shape (num_heads, seq_q, seq_k) or (batch, num_heads, seq_q, seq_k)",
            f"an array of shape {_shape(array)}",
        )
    return array


def _draw_head_grid(fig, array, in_list, out_list, nrows: int, ncols: int):
    """Draws head `h` of `array` into cell `h` of an `nrows x ncols` grid, row by row.

    Unused cells are removed. Returns the last image and the heads' axes.
    """
    num_heads = array.shape[0]
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
    return image, head_axes
