"""An interactive attention explorer: one self-contained HTML page (section 3.2).

The page shows every attention weight of one translated sentence, for the
three uses of attention of section 3.2.3 of Vaswani et al., 2017 (the paper's
order: encoder-decoder attention, encoder self-attention, masked decoder
self-attention):

- a **head view**: the query tokens in a column on the left, the key tokens
  on the right, and a line from each query to each key it attends to, as
  thick and as dark as its weight, one colour per head (section 3.2.2). Heads
  are switched on and off with their coloured boxes; hovering a token keeps
  only its lines; a selector picks the layer and one picks the kind of
  attention;
- a **model view**: every layer (rows) and head (columns) of the chosen kind
  as a small attention map, queries down and keys across; clicking one opens
  it in the head view;
- the sentence, its translation and the model's name.

It needs only NumPy arrays and token strings, so any model that returns its
weights in this project's dict format works (docs/design.md, "Attention
weights are never hidden"): `encoder_layer{i}`, `decoder_layer{i}_block1`
and `decoder_layer{i}_block2`, each `(heads, seq_q, seq_k)` or
`(batch, heads, seq_q, seq_k)`. The page loads nothing: its script and style
are inline, and the weights are stored in it as bytes (0-255, base64), about
1.4 characters a weight. It runs as a file in a browser, and inline in
Jupyter (classic Notebook, JupyterLab, VS Code), where it needs no require.js;
every page gets its own element id, so several can share a notebook.

Example:

```python
from transformer.plot.explorer import attention_explorer_html, show_attention_explorer
result = translator("o gato preto come o bolo")
html = attention_explorer_html(result.attention_weights, result.input_tokens, result.tokens,
                               sentence="o gato preto come o bolo",
                               translation=result.text, model_name="runs/toy")
Path("explorer.html").write_text(html, encoding="utf-8")
show_attention_explorer(result.attention_weights, result.input_tokens, result.tokens)
```
"""

from __future__ import annotations

import base64
import html
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from importlib import resources

import numpy as np

from transformer.plot._figure import _as_tokens

__all__ = [
    "ATTENTION_KINDS",
    "attention_axes",
    "attention_explorer_html",
    "show_attention_explorer",
]

# The three uses of attention (section 3.2.3), in the paper's order: the
# weights-dict key of layer i, the name shown, and which tokens are the
# queries and which the keys ("source" or "target").
ATTENTION_KINDS = (
    ("decoder_layer{i}_block2", "encoder-decoder attention", "target", "source"),
    ("encoder_layer{i}", "encoder self-attention", "source", "source"),
    ("decoder_layer{i}_block1", "masked decoder self-attention", "target", "target"),
)
_KEY = re.compile(r"^(encoder_layer(\d+)|decoder_layer(\d+)_block([12]))$")
# Weights are stored as round(255 * w): the page shows them to two decimals.
_LEVELS = 255


def attention_axes(name: str, input_tokens, tokens, num_queries: int | None = None):
    """The (key tokens, query tokens) of the weights `name`, as the model saw them.

    The encoder attends over the source tokens. The decoder's position `i`
    reads target token `i` and predicts token `i + 1`; a translator's output
    `tokens` (`[START]` ... `[END]`) are one longer than the decoder's
    queries, so its rows are named by the token they predict (`tokens[1:]`)
    and the decoder's keys by the token they read (`tokens[:-1]`). Target
    tokens as long as the queries name both alike.

    Args:
        name: a weights-dict key, e.g. `"decoder_layer1_block2"`.
        input_tokens: the source tokens (encoder positions).
        tokens: the target tokens: as many as the decoder's queries, or one
            more (a translator's output).
        num_queries: the decoder's query count, if known (to tell the two apart).

    Returns:
        `(keys, queries)`, two lists of token strings.
    """
    source = list(input_tokens)
    target = list(tokens)
    if name.startswith("encoder"):
        return source, source
    if num_queries is None or len(target) == num_queries + 1:
        outputs, inputs = target[1:], target[:-1]
    else:
        outputs = inputs = target
    return (inputs if name.endswith("block1") else source), outputs


def attention_explorer_html(
    attention_weights: Mapping[str, object],
    input_tokens,
    tokens,
    *,
    sentence: str = "",
    translation: str = "",
    model_name: str = "",
    batch_index: int = 0,
    full_page: bool = True,
) -> str:
    """Builds the attention explorer of one sentence as a self-contained HTML string.

    Args:
        attention_weights: the weights dict (see the module docstring): numpy
            arrays or tensors `(heads, seq_q, seq_k)` or `(batch, heads,
            seq_q, seq_k)`; any subset of the three kinds, layers from 1.
        input_tokens: the source tokens, one per encoder position (str or
            bytes, e.g. `Translation.input_tokens`).
        tokens: the target tokens: one per decoder position, or with one
            more, `[START]` ... (`Translation.tokens`; see `attention_axes`).
        sentence: the source sentence, shown at the top.
        translation: its translation, shown under it.
        model_name: the model's name or run directory, shown in the title.
        batch_index: the sentence of a batch of 4-D weights.
        full_page: a whole HTML document (for a file); False gives one `<div>`
            to insert into another page (what `show_attention_explorer` uses).

    Returns:
        The HTML, with its script and style inline, loading nothing.

    Raises:
        ValueError: for an unknown key, a missing layer, a shape that does not
            match the tokens or the other layers, or weights outside [0, 1].
    """
    source = _as_tokens(input_tokens, "input_tokens")
    target = _as_tokens(tokens, "tokens")
    if source is None or target is None:
        raise ValueError("Received no tokens: pass `input_tokens` and `tokens`.")
    kinds = _kinds(attention_weights, source, target, batch_index)
    element_id = f"attention-explorer-{uuid.uuid4().hex[:12]}"
    payload = {"id": element_id, "kinds": kinds}
    body = _TEMPLATE.format(
        id=element_id,
        model=html.escape(model_name or "a Transformer"),
        sentence=html.escape(sentence) or "&mdash;",
        translation=html.escape(translation) or "&mdash;",
        css=_asset("explorer.css"),
        # "</" would end the script early; JSON allows "<\/".
        data=json.dumps(payload, ensure_ascii=False).replace("</", "<\\/"),
        js=_asset("explorer.js"),
    )
    if not full_page:
        return body
    title = html.escape(f"Attention explorer: {sentence}" if sentence else "Attention explorer")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{title}</title>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def show_attention_explorer(attention_weights, input_tokens, tokens, **kwargs) -> None:
    """Displays the attention explorer inline in Jupyter.

    Takes the arguments of `attention_explorer_html` (without `full_page`).
    The script runs where the output is inserted, with no require.js, so it
    works in classic Notebook and in JupyterLab (in a trusted notebook:
    Jupyter does not run the scripts of outputs it did not produce itself;
    the page says so when its script has not run). Returns None, so that a
    cell ending with the call shows the page once.
    """
    from IPython.display import HTML, display

    display(HTML(
        attention_explorer_html(attention_weights, input_tokens, tokens, full_page=False, **kwargs)
    ))


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _kinds(weights: Mapping[str, object], source, target, batch_index: int) -> list[dict]:
    """The page's data: per kind of attention, its tokens and its weights as bytes."""
    by_key = {}
    for key, value in weights.items():
        if not isinstance(key, str) or _KEY.match(key) is None:
            raise ValueError(
                f"Received an unknown attention-weights key {key!r}, expected "
                "encoder_layer{i}, decoder_layer{i}_block1 or decoder_layer{i}_block2."
            )
        by_key[key] = _as_heads(value, key, batch_index)
    if not by_key:
        raise ValueError("Received no attention weights: the dict is empty.")
    kinds = []
    for pattern, title, queries_side, keys_side in ATTENTION_KINDS:
        layers = _layers_of(by_key, pattern)
        if not layers:
            continue
        first = pattern.format(i=1)
        keys, queries = attention_axes(first, source, target, layers[0].shape[1])
        stacked = _stack(layers, pattern, (len(queries), len(keys)))
        quantized = np.rint(stacked * _LEVELS).astype(np.uint8)  # (layers, heads, q, k)
        kinds.append({
            "name": pattern, "title": title, "querySide": queries_side, "keySide": keys_side,
            "queries": queries, "keys": keys, "layers": stacked.shape[0],
            "heads": stacked.shape[1], "levels": _LEVELS,
            "weights": base64.b64encode(quantized.tobytes()).decode("ascii"),
        })
    return kinds


def _as_heads(value, key: str, batch_index: int) -> np.ndarray:
    """One sentence's weights, `(heads, seq_q, seq_k)` float64 in [0, 1]."""
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float64)
    if array.ndim == 4:
        if not -array.shape[0] <= batch_index < array.shape[0]:
            raise ValueError(
                f"Received batch_index={batch_index} for `{key}` of shape {array.shape}, "
                f"which holds {array.shape[0]} sentences."
            )
        array = array[batch_index]
    if array.ndim != 3:
        raise ValueError(
            f"Received `{key}` of shape {array.shape}, expected (heads, seq_q, seq_k) or "
            "(batch, heads, seq_q, seq_k)."
        )
    if not np.all(np.isfinite(array)) or array.min() < 0 or array.max() > 1 + 1e-6:
        raise ValueError(f"Received `{key}` with values outside [0, 1]: not attention weights.")
    return np.clip(array, 0.0, 1.0)


def _layers_of(by_key: dict, pattern: str) -> list[np.ndarray]:
    """The weights of one kind, layer 1, 2, ...; a gap in the numbering is an error."""
    layer_key = re.compile(pattern.format(i=r"(\d+)"))
    found = sorted(int(m.group(1)) for m in map(layer_key.fullmatch, by_key) if m)
    if found and found != list(range(1, len(found) + 1)):
        raise ValueError(
            f"Received the layers {found} of {pattern}, expected 1 to {len(found)} without gaps."
        )
    return [by_key[pattern.format(i=i)] for i in found]


def _stack(layers: Sequence[np.ndarray], pattern: str, expected: tuple[int, int]) -> np.ndarray:
    """The layers of one kind as `(layers, heads, seq_q, seq_k)`, shapes checked."""
    heads = layers[0].shape[0]
    for i, layer in enumerate(layers, start=1):
        if layer.shape != (heads, *expected):
            raise ValueError(
                f"Received `{pattern.format(i=i)}` of shape {layer.shape}, expected "
                f"{(heads, *expected)}: {heads} heads, {expected[0]} query tokens (rows) and "
                f"{expected[1]} key tokens (columns)."
            )
    return np.stack(layers)


_TEMPLATE = """<div class="txe" id="{id}">
<style>{css}</style>
<div class="txe-title">Attention explorer &middot; <span class="txe-model">{model}</span></div>
<div class="txe-text"><span class="txe-label">sentence</span> <span class="txe-sentence">{sentence}</span></div>
<div class="txe-text"><span class="txe-label">translation</span> <span class="txe-translation">{translation}</span></div>
<div class="txe-noscript">The explorer is drawn by its script, which has not run here. Open the
HTML file in a browser, or trust the notebook (File &rarr; Trust Notebook) and run the cell again.</div>
<div class="txe-controls"></div>
<div class="txe-panels">
<div class="txe-panel"><div class="txe-panel-title">head view</div><div class="txe-hint"></div><div class="txe-head-view"></div></div>
<div class="txe-panel"><div class="txe-panel-title">model view: layers &times; heads</div><div class="txe-hint">Each map has a row per query and a column per key; click one to open it in the head view.</div><div class="txe-model-view"></div></div>
</div>
<script type="application/json" class="txe-data">{data}</script>
<script>{js}</script>
</div>"""
