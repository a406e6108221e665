"""The model's hyperparameters, `TransformerConfig`, and the named `PRESETS`.

Plain Python (no TensorFlow at import), so that a command line can show and
check them before TensorFlow starts; `transformer.model.build_model` builds the
model of a `TransformerConfig`. Sections 3 and 6.2 of Vaswani et al., 2017 for what the
fields mean.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from transformer._validation import check_heads_divide, check_positive_int, check_rate
from transformer.settings import setting


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """The model's hyperparameters, frozen; `PRESETS` holds the named ones
    (`dataclasses.replace` or `from_preset(name, **changes)` makes another).

    Vocabulary sizes come from the tokenizers, so `transformer.model.build_model`
    takes them.

    Example:

    >>> config = TransformerConfig.from_preset("tutorial", dropout_rate=0.2)
    >>> config.num_layers, config.d_model, config.dropout_rate
    (4, 128, 0.2)
    """

    num_layers: int = setting(4, "encoder and decoder layers, N (section 3.1)",
                              section="model", kind="positive_int", metavar="N")
    # A deep encoder with a shallow decoder (Kasai et al., 2021, "Deep Encoder,
    # Shallow Decoder"): the decoder is the dearer half of a training step and
    # the whole of every decoding step.
    num_decoder_layers: int | None = setting(
        None, "decoder layers", section="model", kind="positive_int",
        metavar="N", default_help="--num-layers")
    d_model: int = setting(128, "width of the embeddings and of every sublayer's output",
                           section="model", kind="positive_int", metavar="N")
    num_heads: int = setting(8, "attention heads, h (section 3.2.2); must divide d_model",
                             section="model", kind="positive_int", metavar="N")
    dff: int = setting(512, "inner width of the feed-forward sublayers (section 3.3)",
                       section="model", kind="positive_int", metavar="N")
    dropout_rate: float = setting(
        0.1, "dropout rate (section 5.4); real corpora train without it: short runs "
        "underfit and learnt much more without it, see BENCHMARKS.md", section="model",
        kind="rate", flag="--dropout", metavar="RATE")
    max_length: int = setting(128, "rows of the positional encoding: the longest sequence",
                              section="model", flag="")
    # One weight matrix for both embeddings and the pre-softmax projection
    # (section 3.4); needs a shared vocabulary (`RunConfig.shared_vocab` sets it).
    tie_embeddings: bool = setting(False, "tie the embeddings and the pre-softmax weights",
                                   section="model", flag="")
    normalize_first: bool = setting(
        False, "pre-norm layers, x + sublayer(LayerNorm(x)), instead of the paper's "
        "post-norm LayerNorm(x + sublayer(x)); short runs on real text learnt much faster "
        "with it, see BENCHMARKS.md", section="model", kind="switch")

    def __post_init__(self):
        for name in ("num_layers", "d_model", "num_heads", "dff", "max_length"):
            check_positive_int(name, getattr(self, name))
        if self.num_decoder_layers is not None:
            check_positive_int("num_decoder_layers", self.num_decoder_layers)
        check_rate("dropout_rate", self.dropout_rate)
        check_heads_divide(self.d_model, self.num_heads)

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """The preset `name` with the given fields replaced (None values are ignored)."""
        if name not in PRESETS:
            raise ValueError(
                f"Received an unknown preset. Expected one of {sorted(PRESETS)}. "
                f"Received: preset={name!r}"
            )
        overrides = {key: value for key, value in overrides.items() if value is not None}
        return dataclasses.replace(PRESETS[name], **overrides)

    @property
    def decoder_layers(self) -> int:
        """The decoder's layers: `num_decoder_layers`, or `num_layers` when None."""
        return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransformerConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"Unknown TransformerConfig fields: {sorted(unknown)}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


PRESETS: dict[str, TransformerConfig] = {
    # Small enough to learn the toy corpus quickly on a laptop CPU
    # with train.py's defaults (their results: BENCHMARKS.md, at the top).
    "toy": TransformerConfig(
        num_layers=2, d_model=64, num_heads=4, dff=256, dropout_rate=0.1, max_length=64
    ),
    # The toy's width and depth for real sentences (max_length as the others'):
    # a size below `small` for the shortest budgets; not on the size rule's
    # `SIZE_LADDER` (BENCHMARKS.md, "The budget chooses the model").
    "mini": TransformerConfig(
        num_layers=2, d_model=64, num_heads=4, dff=256, dropout_rate=0.1, max_length=256
    ),
    # Half the tutorial's depth (`transformer.run.sizing`).
    "small": TransformerConfig(
        num_layers=2, d_model=128, num_heads=8, dff=512, dropout_rate=0.1, max_length=256
    ),
    # The base configuration of the TensorFlow tutorial.
    "tutorial": TransformerConfig(
        num_layers=4, d_model=128, num_heads=8, dff=512, dropout_rate=0.1, max_length=256
    ),
    # Twice the tutorial's width (its feed-forward sublayers four times it, as in
    # the paper): the sizes between the tutorial's and the paper's base.
    "medium": TransformerConfig(
        num_layers=4, d_model=256, num_heads=8, dff=1024, dropout_rate=0.1, max_length=256
    ),
    "large": TransformerConfig(
        num_layers=6, d_model=384, num_heads=8, dff=1536, dropout_rate=0.1, max_length=256
    ),
    # The paper's base and big models (Table 3; big with its EN-DE dropout).
    "base": TransformerConfig(
        num_layers=6, d_model=512, num_heads=8, dff=2048, dropout_rate=0.1, max_length=256
    ),
    "big": TransformerConfig(
        num_layers=6, d_model=1024, num_heads=16, dff=4096, dropout_rate=0.3, max_length=256
    ),
}

# The paper's own models: a run of one keeps the paper's dropout and label
# smoothing (section 5.4) on real corpora too (`transformer.run.recipes`).
PAPER_PRESETS = ("base", "big")
