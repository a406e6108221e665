"""What the figure modules share (private): argument checks, token ticks, mask colours.

Every figure is a `Figure` subclass that renders in Jupyter as a PNG.

Private to the `transformer.plot` package; import figures from `transformer.plot`.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

# Colours of the two mask values: light for allowed (0), dark for masked (1).
_MASK_COLORS = ("#f4f4f4", "#2f3b73")
_MASK_LABELS = ("allowed (0)", "masked (1)")
# Masks and attention maps up to this size get their values written in the cells.
_ANNOTATE_MAX_SIZE = 16


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


def _matrix(value, name: str, expected: str) -> np.ndarray:
    """`value` as a 2-D array, leading axes of size 1 dropped; else a ValueError."""
    array = _to_numpy(value, name)
    while array.ndim > 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2:
        raise _invalid(name, expected, f"an array of shape {_shape(array)}")
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
