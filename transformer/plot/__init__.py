"""Figures for studying attention: encodings, masks, schedules and attention weights.

Every function returns a `matplotlib.figure.Figure` and never calls
`plt.show()`. Figures are built with the object API (`matplotlib.figure.Figure`),
never through pyplot, so no global figure state accumulates: the functions work
headless with the Agg backend, in scripts (`fig.savefig(...)`) and in Jupyter,
where a returned figure renders as a PNG when it is the value of a cell.

Conventions shared by all figures:

- Masks follow the single convention of docs/design.md: **1 = masked (attention NOT
  allowed)**, 0 = allowed. The colour bar of every mask plot says so.
- Matrices are drawn with the query position (row `i`) on the y-axis, top to
  bottom, and the key position (column `j`) on the x-axis, left to right, the
  way they are printed. A look-ahead mask therefore shows its 1s in the upper
  right triangle: query `i` cannot see keys `j > i`.
- Tokens may be given as lists of `str` or `bytes` (decoded as UTF-8), numpy
  arrays or TensorFlow string tensors. TensorFlow is never imported here;
  tensors are converted through their `.numpy()` method.

The figures live in modules by what they draw, and are all re-exported here:
`encodings` (positional encoding, masks), `attention` (attention weights),
`dot_product` (why divide by sqrt(d_k)) and `training` (learning rate,
training curves); `_figure` holds what they share. `explorer` is not a
figure: it writes the interactive attention explorer, a self-contained HTML
page.

Example:

>>> import numpy as np
>>> from transformer.plot import plot_attention_head
>>> weights = np.full((2, 3), 1 / 3)
>>> fig = plot_attention_head(["o", "gato", "preto"], ["the", "cat"], weights)
>>> fig.savefig("head.png")
"""

from transformer.plot.attention import (
    attention_layer_description,
    plot_attention_head,
    plot_attention_overview,
    plot_attention_weights,
)
from transformer.plot.dot_product import dot_product_statistics, plot_dot_product_variance
from transformer.plot.encodings import plot_mask, plot_masks, plot_positional_encoding
from transformer.plot.explorer import (
    attention_axes,
    attention_explorer_html,
    show_attention_explorer,
)
from transformer.plot.training import plot_learning_rate, plot_training_curves

__all__ = [
    "attention_axes",
    "attention_explorer_html",
    "attention_layer_description",
    "dot_product_statistics",
    "plot_attention_head",
    "plot_attention_overview",
    "plot_attention_weights",
    "plot_dot_product_variance",
    "plot_learning_rate",
    "plot_mask",
    "plot_masks",
    "plot_positional_encoding",
    "plot_training_curves",
    "show_attention_explorer",
]
