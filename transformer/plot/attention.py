"""Figures of attention weights: one head, one layer's heads, or every layer at once.

`plot_attention_head` draws one head, `plot_attention_weights` every head of a
layer (section 3.2.2), named by its role in the model (section 3.2.3), and
`plot_attention_overview` every layer and head of each kind of attention.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
from matplotlib.figure import Figure

from transformer._validation import check_positive_int
from transformer.plot._figure import (
    _as_tokens,
    _invalid,
    _matrix,
    _matrix_figsize,
    _new_figure,
    _set_token_ticks,
    _shape,
    _to_numpy,
)

__all__ = [
    "attention_layer_description",
    "plot_attention_head",
    "plot_attention_overview",
    "plot_attention_weights",
]

# The roles of attention in the model (section 3.2.3), by attention-weights dict key (docs/design.md).
_LAYER_NAME = re.compile(r"^(encoder|decoder)_layer(\d+)(?:_block([12]))?$")
_ROLES = {
    ("encoder", None): "encoder self-attention",
    ("decoder", "1"): "masked decoder self-attention",
    ("decoder", "2"): "encoder-decoder attention",
}


def attention_layer_description(layer_name: str | None) -> str:
    """Names the role (section 3.2.3) of an attention-weights dict key (docs/design.md).

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


# Where the keys and the queries of each role come from (section 3.2.3), for the axis labels.
_ROLE_AXES = {
    ("encoder", None): ("source", "source"),
    ("decoder", "1"): ("target", "target"),
    ("decoder", "2"): ("source", "target"),
}


def _axis_names(layer_name: str | None) -> tuple[str, str]:
    """The axis captions of token labels: by role (section 3.2.3), else "keys", "queries"."""
    match = _LAYER_NAME.match(layer_name or "")
    sides = _ROLE_AXES.get(match.groups()[::2]) if match else None
    if sides is None:
        return "keys", "queries"
    return f"{sides[0]} tokens (keys)", f"{sides[1]} tokens (queries)"


def _draw_attention(ax, weights, in_tokens, out_tokens, vmax, axis_labels=(True, True),
                    layer_name=None):
    num_q, num_k = weights.shape
    image = ax.imshow(
        weights, cmap="viridis", vmin=0.0, vmax=vmax, origin="upper", interpolation="nearest"
    )
    _set_token_ticks(ax, in_tokens, num_k, "x")
    _set_token_ticks(ax, out_tokens, num_q, "y")
    keys, queries = _axis_names(layer_name)
    if axis_labels[0]:
        ax.set_xlabel(keys if in_tokens is not None else "key position")
    if axis_labels[1]:
        ax.set_ylabel(queries if out_tokens is not None else "query position")
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

    Row `i` holds the softmax weights that query `i` gives to each key
    (section 3.2.1); every row sums to 1. The axes are captioned "queries"
    and "keys" (`plot_attention_weights` names their tokens by the layer's role).

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

    Example (a model's head is `weights["decoder_layer4_block2"][0, 0]`, from
    weights of shape `(batch, heads, len(out), len(in))`):

    >>> import numpy as np
    >>> head = np.full((3, 4), 1 / 4)  # (len(out_tokens), len(in_tokens)), rows sum to 1
    >>> fig = plot_attention_head(["[START]", "o", "gato", "[END]"], ["the", "cat", "[END]"], head)
    >>> len(fig.axes)  # the head and its colour bar
    2
    """
    in_list = _as_tokens(in_tokens, "in_tokens")
    out_list = _as_tokens(out_tokens, "out_tokens")
    array = _matrix(
        weights, "weights", "one head's weights of shape (len(out_tokens), len(in_tokens))"
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

    Example (two heads of a one-layer model's weights dict):

    >>> import numpy as np
    >>> weights = {"decoder_layer1_block2": np.full((1, 2, 3, 4), 1 / 4)}  # (batch, heads, q, k)
    >>> fig = plot_attention_weights(
    ...     ["[START]", "o", "gato", "[END]"], ["the", "cat", "[END]"], weights,
    ...     layer_name="decoder_layer1_block2")
    >>> len(fig.axes)  # one per head and the colour bar
    3
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
    image, head_axes = _draw_head_grid(fig, array, in_list, out_list, nrows, ncols, layer_name)
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


def _draw_head_grid(fig, array, in_list, out_list, nrows: int, ncols: int, layer_name=None):
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
            layer_name=layer_name,
        )
        ax.set_title(f"Head {head + 1}")
        head_axes.append(ax)
    return image, head_axes


# ------------------------------------------------------------ overview of all layers


class _Kind(NamedTuple):
    """One kind of attention of `plot_attention_overview`."""

    key_format: str  # its weights-dict key for layer i
    role: str  # its name in section 3.2.3
    feeding: str  # where its queries and keys come from
    keys_from: str  # "input" or "output" tokens
    queries_from: str


# In the order of section 3.2.3.
_OVERVIEW_KINDS = {
    "cross": _Kind(
        "decoder_layer{}_block2",
        _ROLES[("decoder", "2")],
        "queries from the decoder, keys from the encoder",
        "input",
        "output",
    ),
    "encoder": _Kind(
        "encoder_layer{}",
        _ROLES[("encoder", None)],
        "queries and keys from the encoder",
        "input",
        "input",
    ),
    "decoder_self": _Kind(
        "decoder_layer{}_block1",
        _ROLES[("decoder", "1")],
        "queries and keys from the decoder, later keys masked",
        "output",
        "output",
    ),
}
_OVERVIEW_TITLE = "Attention by layer (rows) and head (columns), section 3.2.3"


def plot_attention_overview(
    in_tokens,
    out_tokens,
    attention_weights: Mapping,
    kind: str = "all",
    *,
    batch_index: int = 0,
    figsize=None,
) -> Figure:
    """Plots every head of every layer for one kind of attention, or all three.

    A static counterpart of bertviz's "model view": one small panel per layer
    (rows, top = layer 1) and head (columns), titled "layer i, head j". The
    tokens label the y-axis (queries) of the first column and the x-axis (keys)
    of the last row; the other panels show only the weights. Each kind of
    attention has one colour scale, from 0 to its largest weight, and one
    colour bar, so its layers and heads can be compared.

    The kinds are named as in section 3.2.3 of the paper, in its order:
    `"cross"`, encoder-decoder attention (`decoder_layer{i}_block2`), queries
    from the decoder and keys from the encoder output; `"encoder"`, encoder
    self-attention (`encoder_layer{i}`); `"decoder_self"`, masked decoder
    self-attention (`decoder_layer{i}_block1`). `"all"` draws the three as
    three blocks, in that order, each titled with its kind.

    Args:
        in_tokens: the source tokens (`Translation.input_tokens`): keys and
            queries of encoder self-attention, keys of encoder-decoder
            attention. None for positions.
        out_tokens: the output tokens. Either `Translation.tokens` as given,
            starting with `[START]` (one more than the decoder's query rows):
            the decoder read `out_tokens[:-1]` (the keys of its
            self-attention) and row `i` predicts `out_tokens[i + 1]` (the
            query labels); or exactly one token per query row, used on both
            axes. None for positions. Not used when `kind="encoder"`.
        attention_weights: the Transformer's weights dict with keys
            `encoder_layer{i}`, `decoder_layer{i}_block1` and
            `decoder_layer{i}_block2`, `i` from 1, each of shape
            `(num_heads, seq_q, seq_k)` (one sentence, as in
            `Translation.attention_weights`) or `(batch, num_heads, seq_q,
            seq_k)`. Only the keys of the kinds drawn are needed.
        kind: `"all"`, `"cross"`, `"encoder"` or `"decoder_self"`.
        batch_index: which batch element to draw from 4-D weights.
        figsize: figure size in inches; by default it grows with the number
            of layers, heads and tokens.

    Returns:
        A `Figure`. For one kind, one axes per layer and head and a colour
        bar; for `"all"`, one `SubFigure` per kind (`fig.subfigs`) holding
        the same.

    Raises:
        ValueError: on an unknown `kind`, a weights dict without the layers
            of a kind (or with a gap in their numbers), weights that are not
            3-D or 4-D or differ in shape between layers, or token counts that
            do not match the weights.

    Example (a `Translation` gives the three as `result.input_tokens`,
    `result.tokens` and `result.attention_weights`; here two layers of two heads):

    >>> import numpy as np
    >>> weights = {f"decoder_layer{i}_block2": np.full((2, 3, 4), 1 / 4) for i in (1, 2)}
    >>> fig = plot_attention_overview(
    ...     ["[START]", "o", "gato", "[END]"], ["[START]", "the", "cat", "[END]"], weights,
    ...     kind="cross")
    >>> len(fig.axes)  # 2 layers x 2 heads, and the colour bar
    5
    """
    if kind != "all" and kind not in _OVERVIEW_KINDS:
        raise _invalid("kind", f"one of {['all', *_OVERVIEW_KINDS]}", repr(kind))
    if not isinstance(attention_weights, Mapping):
        raise _invalid(
            "attention_weights",
            "a dict with keys encoder_layer{i}, decoder_layer{i}_block1, decoder_layer{i}_block2",
            type(attention_weights).__name__,
        )
    in_list = _as_tokens(in_tokens, "in_tokens")
    out_list = _as_tokens(out_tokens, "out_tokens")
    blocks = []
    for name in _OVERVIEW_KINDS if kind == "all" else (kind,):
        layers = _overview_layers(attention_weights, name, batch_index)
        keys, queries = _overview_tokens(name, layers, in_list, out_list)
        blocks.append((name, layers, keys, queries))
    fig = _new_figure(figsize or _overview_figsize(blocks))
    if len(blocks) == 1:
        _draw_overview_block(fig, *blocks[0])
        return fig
    heights = [_overview_block_size(*block)[1] for block in blocks]
    for subfig, block in zip(
        fig.subfigures(len(blocks), 1, height_ratios=heights), blocks, strict=True
    ):
        _draw_overview_block(subfig, *block)
    fig.suptitle(_OVERVIEW_TITLE, fontweight="bold")
    return fig


def _overview_layers(attention_weights: Mapping, kind: str, batch_index: int) -> list[np.ndarray]:
    """The `(num_heads, seq_q, seq_k)` weights of layers 1, 2, ... of one kind."""
    spec = _OVERVIEW_KINDS[kind]
    found = set()
    for key in attention_weights:
        match = _LAYER_NAME.match(str(key))
        if match is not None and _ROLES.get((match.group(1), match.group(3))) == spec.role:
            found.add(int(match.group(2)))
    last = max(found, default=1)
    missing = [spec.key_format.format(i) for i in range(1, last + 1) if i not in found]
    if missing:
        raise ValueError(
            f"Received `attention_weights` without {', '.join(f'`{key}`' for key in missing)} "
            f"({spec.role}, kind={kind!r}); its keys are {sorted(map(str, attention_weights))}."
        )
    layers = []
    for i in range(1, last + 1):
        key = spec.key_format.format(i)
        array = _heads_of(attention_weights[key], f"attention_weights[{key!r}]", batch_index)
        if layers and array.shape != layers[0].shape:
            raise ValueError(
                f"Received `attention_weights[{key!r}]` of shape {_shape(array)} (num_heads, "
                f"seq_q, seq_k) for a layer 1 of shape {_shape(layers[0])}; every layer of "
                f"{spec.role} needs the same shape."
            )
        layers.append(array)
    return layers


def _overview_tokens(kind: str, layers, in_list, out_list):
    """The `(key, query)` tokens of one kind of attention, checked against the weights."""
    spec = _OVERVIEW_KINDS[kind]
    _, num_q, num_k = layers[0].shape
    layer_1 = spec.key_format.format(1)
    outputs = (out_list, out_list)  # (as keys, as queries)
    if out_list is not None and spec.queries_from == "output":
        if len(out_list) == num_q + 1:  # [START] ...: the decoder read [:-1], predicted [1:]
            outputs = (out_list[:-1], out_list[1:])
        elif len(out_list) != num_q:
            raise ValueError(
                f"Received {len(out_list)} `out_tokens` for `{layer_1}` with {num_q} queries "
                f"(rows); expected {num_q} tokens, one per query, or {num_q + 1} starting "
                "with [START] (as `Translation.tokens`)."
            )
    keys = in_list if spec.keys_from == "input" else outputs[0]
    queries = in_list if spec.queries_from == "input" else outputs[1]
    for tokens, size, source, axis in (
        (keys, num_k, spec.keys_from, "keys (columns)"),
        (queries, num_q, spec.queries_from, "queries (rows)"),
    ):
        if tokens is not None and len(tokens) != size:
            name = "in_tokens" if source == "input" else "out_tokens"
            raise ValueError(
                f"Received {len(tokens)} `{name}` for `{layer_1}` with {size} {axis}; "
                f"expected {size} tokens."
            )
    return keys, queries


def _overview_block_size(kind, layers, keys, queries) -> tuple[float, float]:
    """Width and height in inches of one kind's grid of panels, with labels and titles."""
    num_layers, (num_heads, num_q, num_k) = len(layers), layers[0].shape
    panel = min(max(0.9, 0.13 * max(num_q, num_k)), 2.0)
    char = 0.07  # tick labels are drawn at 7 points
    label_width = char * max((len(t) for t in queries), default=2) if queries else 0.3
    label_height = char * max((len(t) for t in keys), default=2) if keys else 0.3
    title = len(_OVERVIEW_KINDS[kind].role) + len(_OVERVIEW_KINDS[kind].feeding) + 2
    width = max(num_heads * (panel + 0.15) + label_width + 1.6, 0.11 * title + 0.6)
    height = num_layers * (panel + 0.3) + label_height + 0.9
    return width, height


def _overview_figsize(blocks) -> tuple[float, float]:
    sizes = [_overview_block_size(*block) for block in blocks]
    width = max(size[0] for size in sizes)
    height = sum(size[1] for size in sizes) + (0.4 if len(blocks) > 1 else 0.0)
    return (min(width, 30.0), min(height, 40.0))


def _draw_overview_block(container, kind, layers, keys, queries) -> None:
    """Draws one kind's layer x head grid, colour bar and titles into a figure or subfigure."""
    spec = _OVERVIEW_KINDS[kind]
    num_layers, num_heads = len(layers), layers[0].shape[0]
    grid = container.subplots(num_layers, num_heads, squeeze=False)
    vmax = max(float(layer.max()) if layer.size else 1.0 for layer in layers)
    image = None
    for layer, row in enumerate(grid):
        for head, ax in enumerate(row):
            image = ax.imshow(
                layers[layer][head],
                cmap="viridis",
                vmin=0.0,
                vmax=vmax,
                origin="upper",
                interpolation="nearest",
            )
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
            _overview_ticks(ax, keys, queries, layers[layer].shape[1:], layer, head, num_layers)
    container.colorbar(image, ax=grid.ravel().tolist(), shrink=0.8).set_label("attention weight")
    container.supxlabel(f"{spec.keys_from} tokens (keys)" if keys is not None else "key position")
    container.supylabel(
        f"{spec.queries_from} tokens (queries)" if queries is not None else "query position"
    )
    container.suptitle(f"{spec.role}: {spec.feeding}")


def _overview_ticks(ax, keys, queries, shape, layer: int, head: int, num_layers: int) -> None:
    """Token ticks on the first column (queries) and the last row (keys); none elsewhere."""
    num_q, num_k = shape
    if head == 0:
        _set_token_ticks(ax, queries, num_q, "y")
    else:
        ax.set_yticks([])
    if layer == num_layers - 1:
        _set_token_ticks(ax, keys, num_k, "x")
    else:
        ax.set_xticks([])
    ax.tick_params(labelsize=7)
