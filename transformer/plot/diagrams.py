"""The paper's block diagrams, drawn with the sizes of this project's layers.

Figure 1 of Vaswani et al., 2017 (the model) is `plot_transformer_architecture`,
the left half of Figure 2 (scaled dot-product attention, section 3.2.1) is
`plot_scaled_dot_product_diagram`, its right half (multi-head attention,
section 3.2.2) is `plot_multi_head_diagram`. Every box is labelled with the
shape its tensor has for the sizes given, e.g. those of a
`transformer.TransformerConfig`, so the figures show a model that exists rather
than the paper's picture of one. Each function returns a
`matplotlib.figure.Figure`.

Example:

>>> from transformer.plot.diagrams import plot_multi_head_diagram
>>> fig = plot_multi_head_diagram(d_model=64, num_heads=4, seq_len_q=5, seq_len_k=7)
>>> fig.savefig("multi_head.png")
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from transformer._validation import check_positive_int
from transformer.plot._figure import _invalid, _new_figure

__all__ = [
    "ATTENTION_COLORS",
    "plot_multi_head_diagram",
    "plot_scaled_dot_product_diagram",
    "plot_transformer_architecture",
]

# One colour per use of attention (section 3.2.3), shared with `transformer.plot.study`.
ATTENTION_COLORS = {
    "encoder-decoder": "#f2b56b",
    "encoder self": "#f7d88b",
    "masked decoder self": "#f0a0a0",
}
_FFN_COLOR = "#a8d5f0"
_NORM_COLOR = "#e8e8c8"
_EMBED_COLOR = "#f4c7d9"
_OTHER_COLOR = "#dfe7d0"
_HEAD_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
                "#8c8c8c", "#ccb974", "#64b5cd")


def _box(ax, x, y, width, height, text, color, fontsize=9, weight="normal"):
    """A rounded box centred on (x, y) with `text` inside; returns its (bottom, top)."""
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                boxstyle="round,pad=0.02,rounding_size=0.12", facecolor=color,
                                edgecolor="#333333", linewidth=1.0))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, weight=weight)
    return y - height / 2, y + height / 2


def _arrow(ax, start, end, color="#333333", style="-|>", connection="arc3", linestyle="-"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=11, color=color,
                                 linewidth=1.1, connectionstyle=connection, linestyle=linestyle,
                                 shrinkA=0, shrinkB=0))


def _shape_note(ax, x, y, text, ha="left"):
    ax.text(x, y, text, ha=ha, va="center", fontsize=7.5, color="#1f4e79", family="monospace")


def _canvas(figsize, xlim, ylim):
    fig = _new_figure(figsize)
    ax = fig.add_subplot()
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("auto")
    ax.axis("off")
    return fig, ax


def _check_sizes(**sizes):
    for name, value in sizes.items():
        check_positive_int(name, value)


# ------------------------------------------------------------ Figure 1: the model


def _column(ax, x, label, tokens, rows, frame, repeat, d_model, width=3.0, height=0.62):
    """An embedding column of Figure 1 with its stack of layers `rows`
    [(name, colour, shape)] in a frame `(bottom, top)`; returns the boxes' centres."""
    _box(ax, x, 0.45, width, 0.5, label, "white")
    _arrow(ax, (x, 0.7), (x, 1.05))
    _box(ax, x, 1.35, width, height, "Embedding × √d_model", _EMBED_COLOR)
    _shape_note(ax, x + width / 2 + 0.1, 1.35, f"(b, {tokens}, {d_model})")
    _arrow(ax, (x, 1.66), (x, 2.0))
    ax.add_patch(_circle(x, 2.25))
    ax.text(x, 2.25, "+", ha="center", va="center", fontsize=11)
    ax.text(x - width / 2 - 0.1, 2.25, "positional\nencoding ∿", ha="right", va="center",
            fontsize=8)
    _arrow(ax, (x, 2.5), (x, frame[0] + 0.25))
    ax.add_patch(Rectangle((x - width / 2 - 0.3, frame[0]), width + 0.6, frame[1] - frame[0],
                           facecolor="#f5f5f5", edgecolor="#777777", linewidth=1.0, zorder=0))
    ax.text(x - width / 2 - 0.45, (frame[0] + frame[1]) / 2, f"{repeat}×", ha="right",
            va="center", fontsize=12, weight="bold")
    centres = []
    y = frame[0] + 0.65
    for name, colour, shape in rows:
        _box(ax, x, y, width, height, name, colour)
        if shape:
            _shape_note(ax, x + width / 2 + 0.4, y, shape)
        centres.append(y)
        y += 0.95 if colour is _NORM_COLOR else 0.82
    for lower, upper in zip(centres, centres[1:], strict=False):
        _arrow(ax, (x, lower + height / 2), (x, upper - height / 2))
    return centres


def plot_transformer_architecture(
    num_layers: int,
    d_model: int,
    num_heads: int,
    dff: int,
    input_vocab_size: int | None = None,
    target_vocab_size: int | None = None,
    num_decoder_layers: int | None = None,
) -> Figure:
    """Figure 1 of Vaswani et al., 2017 (section 3), with this model's sizes.

    The encoder (left) and the decoder (right), each a stack of identical
    layers; every sublayer is followed by "Add & Norm", the post-norm
    `LayerNorm(x + Dropout(sublayer(x)))` of section 3.1. The three uses of
    attention of section 3.2.3 have the colours of `ATTENTION_COLORS`. Shapes
    are written `(b, n, ...)` for the source (`n` tokens) and `(b, m, ...)`
    for the target (`m` tokens); the grey dashed lines are the residual
    connections.

    Args:
        num_layers: encoder layers (and decoder layers unless
            `num_decoder_layers` is given).
        d_model, num_heads, dff: the model's widths (section 3).
        input_vocab_size, target_vocab_size: vocabulary sizes to print, or None.
        num_decoder_layers: decoder layers, when they differ from `num_layers`.

    Returns:
        The figure.

    Raises:
        ValueError: a size is not a positive integer, or `d_model` is not
            divisible by `num_heads`.
    """
    num_decoder_layers = num_layers if num_decoder_layers is None else num_decoder_layers
    _check_sizes(num_layers=num_layers, d_model=d_model, num_heads=num_heads, dff=dff,
                 num_decoder_layers=num_decoder_layers)
    if d_model % num_heads:
        raise _invalid("num_heads", f"a divisor of d_model={d_model}", num_heads)
    depth = d_model // num_heads
    fig, ax = _canvas((10.5, 10.0), (0, 12), (0, 14.6))
    width, height = 3.0, 0.62
    enc_x, dec_x = 3.0, 8.6
    source = f" ({input_vocab_size:,} tokens)" if input_vocab_size else ""
    target = f" ({target_vocab_size:,} tokens)" if target_vocab_size else ""

    enc_rows = [
        ("Multi-Head Attention\n(self, §3.2.3)", ATTENTION_COLORS["encoder self"],
         f"{num_heads} heads × {depth}"),
        ("Add & Norm", _NORM_COLOR, f"(b, n, {d_model})"),
        ("Feed Forward", _FFN_COLOR, f"{d_model}→{dff}→{d_model}"),
        ("Add & Norm", _NORM_COLOR, f"(b, n, {d_model})"),
    ]
    dec_rows = [
        ("Masked Multi-Head\nAttention (self)", ATTENTION_COLORS["masked decoder self"],
         f"{num_heads} heads × {depth}"),
        ("Add & Norm", _NORM_COLOR, f"(b, m, {d_model})"),
        ("Multi-Head Attention\n(encoder-decoder)", ATTENTION_COLORS["encoder-decoder"],
         "weights (b, h, m, n)"),
        ("Add & Norm", _NORM_COLOR, f"(b, m, {d_model})"),
        ("Feed Forward", _FFN_COLOR, f"{d_model}→{dff}→{d_model}"),
        ("Add & Norm", _NORM_COLOR, f"(b, m, {d_model})"),
    ]
    enc_frame, dec_frame = (3.0, 6.9), (3.0, 8.7)
    enc = _column(ax, enc_x, f"Inputs (b, n){source}", "n", enc_rows, enc_frame, num_layers,
                  d_model)
    dec = _column(ax, dec_x, f"Outputs, shifted right (b, m){target}", "m", dec_rows, dec_frame,
                  num_decoder_layers, d_model)
    # Residual connections: from below each sublayer to its Add & Norm.
    for x, centres in ((enc_x, enc), (dec_x, dec)):
        for i in range(0, len(centres), 2):
            start = centres[i] - height / 2 - 0.12
            side = x + width / 2 + 0.18 if i else x - width / 2 - 0.18
            ax.plot([x, side, side], [start, start, centres[i + 1]], color="#999999",
                    linestyle="--", linewidth=0.9)
            _arrow(ax, (side, centres[i + 1]), (x + (width / 2 if side > x else -width / 2),
                                                centres[i + 1]), color="#999999")
    # The encoder's output: keys and values of every decoder layer's cross-attention.
    top = enc[-1] + height / 2
    _arrow(ax, (enc_x, top), (enc_x, 8.3))
    _shape_note(ax, enc_x + 0.1, 8.45, f"encoder output (b, n, {d_model})")
    ax.plot([enc_x, enc_x, 6.0], [8.3, 8.9, 8.9], color="#333333", linewidth=1.1)
    _arrow(ax, (6.0, 8.9), (dec_x - width / 2, dec[2] + 0.1), connection="angle3,angleA=0,angleB=90")
    ax.text(6.15, 9.05, "K, V", fontsize=8, color="#333333")
    # Decoder output -> Linear -> Softmax.
    _arrow(ax, (dec_x, dec[-1] + height / 2), (dec_x, 10.85))
    _box(ax, dec_x, 11.2, width, height, "Linear", _OTHER_COLOR)
    _shape_note(ax, dec_x + width / 2 + 0.1, 11.2, f"(b, m, {target_vocab_size or 'V'})")
    _arrow(ax, (dec_x, 11.52), (dec_x, 11.9))
    _box(ax, dec_x, 12.22, width, height, "Softmax", _OTHER_COLOR)
    _arrow(ax, (dec_x, 12.54), (dec_x, 12.95))
    ax.text(dec_x, 13.2, "Output probabilities", ha="center", va="center", fontsize=9)
    ax.text(6.0, 14.2, f"The Transformer (Figure 1, §3): {num_layers} encoder and "
            f"{num_decoder_layers} decoder layers, d_model={d_model}, h={num_heads}, dff={dff}",
            ha="center", va="center", fontsize=11, weight="bold")
    return fig


def _circle(x, y, radius=0.22):
    """The "+" circle where the positional encoding is added (a patch)."""
    return Circle((x, y), radius, facecolor="white", edgecolor="#333333", linewidth=1.0)


# ------------------------------------------------- Figure 2, left: one attention


def plot_scaled_dot_product_diagram(
    seq_len_q: int, seq_len_k: int, d_k: int, d_v: int | None = None, masked: bool = True
) -> Figure:
    """Figure 2 (left) of Vaswani et al., 2017: scaled dot-product attention, §3.2.1.

    `softmax(Q K^T / sqrt(d_k) + mask * -1e9) V` as the paper draws it, bottom
    to top (MatMul, Scale, Mask (opt.), SoftMax, MatMul), with the shape of
    every intermediate tensor for one head.

    Args:
        seq_len_q: queries `n_q`.
        seq_len_k: keys and values `n_k`.
        d_k: depth of queries and keys.
        d_v: depth of values; `d_k` when None.
        masked: whether to draw the optional mask step.

    Returns:
        The figure.
    """
    d_v = d_k if d_v is None else d_v
    _check_sizes(seq_len_q=seq_len_q, seq_len_k=seq_len_k, d_k=d_k, d_v=d_v)
    fig, ax = _canvas((6.4, 6.6), (0, 10), (0, 10.6))
    x, width, height = 4.2, 2.8, 0.62
    ys = [2.0, 3.3, 4.6, 5.9, 7.6]
    steps = [("MatMul  Q Kᵀ", "#c9d9ef", f"({seq_len_q}, {seq_len_k}) logits"),
             (f"Scale  ÷ √{d_k}", "#f7d88b", f"({seq_len_q}, {seq_len_k}), variance ~1"),
             ("Mask (opt.)  + M·(−10⁹)", "#f0a0a0", "M: 1 = not allowed"),
             ("SoftMax (over keys)", "#b7e0b0", f"({seq_len_q}, {seq_len_k}), rows sum to 1"),
             ("MatMul  weights · V", "#c9d9ef", f"({seq_len_q}, {d_v}) output")]
    if not masked:
        ys, steps = [2.0, 3.5, 5.0, 7.0], steps[:2] + steps[3:]
    for y, (text, color, shape) in zip(ys, steps, strict=True):
        _box(ax, x, y, width, height, text, color)
        _shape_note(ax, x + width / 2 + 0.12, y, shape)
    for lower, upper in zip(ys, ys[1:], strict=False):
        _arrow(ax, (x, lower + height / 2), (x, upper - height / 2))
    for x_in, label, shape in ((x - 0.8, "Q", f"({seq_len_q}, {d_k})"),
                               (x + 0.8, "K", f"({seq_len_k}, {d_k})")):
        ax.text(x_in, 0.55, label, ha="center", va="center", fontsize=12, weight="bold")
        _shape_note(ax, x_in, 0.15, shape, ha="center")
        _arrow(ax, (x_in, 0.8), (x_in, ys[0] - height / 2))
    ax.text(1.0, 0.55, "V", ha="center", va="center", fontsize=12, weight="bold")
    _shape_note(ax, 1.0, 0.15, f"({seq_len_k}, {d_v})", ha="center")
    ax.plot([1.0, 1.0], [0.8, ys[-1]], color="#333333", linewidth=1.1)
    _arrow(ax, (1.0, ys[-1]), (x - width / 2, ys[-1]))
    _arrow(ax, (x, ys[-1] + height / 2), (x, 9.1))
    ax.text(x, 9.35, "Attention(Q, K, V)", ha="center", va="center", fontsize=10)
    ax.text(5.0, 10.2, "Scaled dot-product attention (Figure 2 left, §3.2.1), one head",
            ha="center", va="center", fontsize=10.5, weight="bold")
    return fig


# ------------------------------------------------- Figure 2, right: many heads


def plot_multi_head_diagram(
    d_model: int, num_heads: int, seq_len_q: int, seq_len_k: int | None = None, batch: int = 1
) -> Figure:
    """Figure 2 (right) of Vaswani et al., 2017: multi-head attention, §3.2.2.

    Drawn the way `transformer.MultiHeadAttention` computes it: one
    `Dense(d_model)` per input (`wq`, `wk`, `wv`, all heads' `W_i` side by
    side), `split_heads` (reshape to `(batch, seq, h, depth)`, then transpose
    to `(batch, h, seq, depth)`), `h` scaled dot-product attentions at once,
    `combine_heads` (the inverse transpose and reshape: Concat) and `dense`
    (`W^O`). Each head keeps its colour from the split to the concatenation.

    Args:
        d_model: model width.
        num_heads: heads `h`; must divide `d_model`.
        seq_len_q: query positions.
        seq_len_k: key and value positions; `seq_len_q` when None.
        batch: batch size printed in the shapes.

    Returns:
        The figure.
    """
    seq_len_k = seq_len_q if seq_len_k is None else seq_len_k
    _check_sizes(d_model=d_model, num_heads=num_heads, seq_len_q=seq_len_q,
                 seq_len_k=seq_len_k, batch=batch)
    if d_model % num_heads:
        raise _invalid("num_heads", f"a divisor of d_model={d_model}", num_heads)
    depth = d_model // num_heads
    shown = min(num_heads, len(_HEAD_COLORS))
    fig, ax = _canvas((12.5, 5.9), (0, 25), (0, 11.4))
    b, nq, nk = batch, seq_len_q, seq_len_k

    def striped(x, y, w, h, label, note):
        """A (seq, d_model) block whose columns are coloured by head."""
        for i in range(shown):
            ax.add_patch(Rectangle((x + i * w / shown, y), w / shown, h,
                                   facecolor=_HEAD_COLORS[i], alpha=0.55, edgecolor="white"))
        ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="#333333"))
        ax.text(x + w / 2, y + h + 0.3, label, ha="center", fontsize=8.5)
        _shape_note(ax, x + w / 2, y - 0.3, note, ha="center")

    # Inputs and their projections.
    rows = ((8.2, "Q", nq, "wq"), (5.2, "K", nk, "wk"), (2.2, "V", nk, "wv"))
    for y, name, n, dense in rows:
        ax.add_patch(Rectangle((0.3, y), 2.0, 1.2, facecolor="#eeeeee", edgecolor="#333333"))
        ax.text(1.3, y + 0.6, name, ha="center", va="center", fontsize=12, weight="bold")
        _shape_note(ax, 1.3, y - 0.3, f"({b}, {n}, {d_model})", ha="center")
        _arrow(ax, (2.4, y + 0.6), (3.6, y + 0.6))
        ax.text(3.0, y + 1.0, f"{dense}\n{d_model}×{d_model}", ha="center", fontsize=7.5)
        striped(3.7, y, 2.6, 1.2, f"{dense}({name}): all W_i side by side", f"({b}, {n}, {d_model})")
        _arrow(ax, (6.4, y + 0.6), (7.5, y + 0.6))
        ax.text(6.95, y + 1.0, "split", ha="center", fontsize=7.5)
        # The heads, one small block each, stacked like a deck of cards.
        for i in range(shown):
            ax.add_patch(Rectangle((7.6 + 0.22 * i, y + 0.05 * (shown - i)), 0.9, 1.0,
                                   facecolor=_HEAD_COLORS[i], alpha=0.8, edgecolor="white"))
        _shape_note(ax, 8.5, y - 0.3, f"({b}, {num_heads}, {n}, {depth})", ha="center")
    ax.text(8.5, 9.9, "split_heads: reshape to\n(b, seq, h, depth), transpose",
            ha="center", fontsize=8)
    # Attention, per head.
    for y, _, _, _ in rows:
        _arrow(ax, (9.9 + 0.22 * shown * 0.3, y + 0.6), (11.6, 5.8))
    _box(ax, 12.9, 5.8, 2.6, 1.6, f"{num_heads} × scaled\ndot-product\nattention", "#b7e0b0")
    _shape_note(ax, 12.9, 4.6, f"weights ({b}, {num_heads}, {nq}, {nk})", ha="center")
    _arrow(ax, (14.2, 5.8), (15.2, 5.8))
    for i in range(shown):
        ax.add_patch(Rectangle((15.3 + 0.22 * i, 5.3 + 0.05 * (shown - i)), 0.9, 1.0,
                               facecolor=_HEAD_COLORS[i], alpha=0.8, edgecolor="white"))
    _shape_note(ax, 16.2, 4.95, f"({b}, {num_heads}, {nq}, {depth})", ha="center")
    ax.text(16.2, 6.8, "head_i", ha="center", fontsize=8.5)
    _arrow(ax, (17.6, 5.8), (18.6, 5.8))
    ax.text(18.1, 6.2, "concat", ha="center", fontsize=7.5)
    striped(18.7, 5.2, 2.6, 1.2, "combine_heads: Concat", f"({b}, {nq}, {d_model})")
    _arrow(ax, (21.4, 5.8), (22.4, 5.8))
    ax.text(21.9, 6.2, f"W^O\n{d_model}×{d_model}", ha="center", fontsize=7.5)
    ax.add_patch(Rectangle((22.5, 5.2), 2.2, 1.2, facecolor="#dfe7d0", edgecolor="#333333"))
    ax.text(23.6, 5.8, "output", ha="center", va="center", fontsize=10)
    _shape_note(ax, 23.6, 4.9, f"({b}, {nq}, {d_model})", ha="center")
    more = f" (first {shown} of {num_heads} heads coloured)" if shown < num_heads else ""
    ax.text(12.5, 0.6, f"h = {num_heads} heads of depth d_k = d_v = d_model / h = {depth}; each head "
            f"sees its own {depth} columns of every projection{more}", ha="center", fontsize=9)
    ax.text(12.5, 11.1, "Multi-head attention (Figure 2 right, §3.2.2), with transformer."
            "MultiHeadAttention's shapes", ha="center", fontsize=10.5, weight="bold")
    return fig
