"""A tutorial-faithful Transformer for machine translation in TensorFlow and Keras 3.

The public names are listed in docs/design.md; see each module for the math.

The names below are imported on first use, all together (so every Keras class
of the package is registered for loading, as before): importing a subpackage
that needs no TensorFlow, such as `transformer.cli`, `transformer.data` or
`transformer.rundir`, does not import it.

The paper's layers (positional, masking, attention, layers, model) run on
every Keras backend; under JAX or PyTorch the names of training and decoding
(`_TENSORFLOW_ONLY`) raise `transformer.seams.BackendError`, one line saying
so, and those modules (and TensorFlow) are not imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Lazy, every name: imported all together on first use (`_import_all`), so that
# importing `transformer.cli`, `transformer.data` or `transformer.rundir`
# starts no TensorFlow and no Keras, and so that under JAX or PyTorch the
# paper's layers import while the TensorFlow-only modules (`_TENSORFLOW_ONLY`)
# do not (tests/test_cli.py, tests/test_backends.py). The `TYPE_CHECKING`
# block at the end names them for readers and static tools
# (tests/test_structure.py checks that the two agree).
_EXPORTS = {
    "PAD_ID": "constants",
    "UNK_ID": "constants",
    "START_ID": "constants",
    "END_ID": "constants",
    "RESERVED_TOKENS": "constants",
    "positional_encoding": "positional",
    "PositionalEmbedding": "positional",
    "create_padding_mask": "masking",
    "create_look_ahead_mask": "masking",
    "create_decoder_mask": "masking",
    "create_masks": "masking",
    "to_keras_attention_mask": "masking",
    "scaled_dot_product_attention": "attention",
    "mask_value": "attention",
    "MultiHeadAttention": "attention",
    "copy_weights_to_keras": "keras_interop",
    "copy_weights_from_keras": "keras_interop",
    "EncoderSelfAttention": "attention",
    "MaskedDecoderSelfAttention": "attention",
    "EncoderDecoderAttention": "attention",
    "GlobalSelfAttention": "attention",
    "CausalSelfAttention": "attention",
    "CrossAttention": "attention",
    "FeedForward": "layers",
    "EncoderLayer": "layers",
    "DecoderLayer": "layers",
    "Encoder": "model",
    "Decoder": "model",
    "Transformer": "model",
    "TransformerConfig": "model_config",
    "PRESETS": "model_config",
    "CustomSchedule": "training",
    "MaskedLoss": "training",
    "masked_loss": "training",
    "masked_accuracy": "training",
    "Translator": "decoding.translator",
    "Translation": "decoding.translator",
    "Strategy": "decoding.strategies",
    "Greedy": "decoding.strategies",
    "Beam": "decoding.strategies",
    "Sample": "decoding.strategies",
    "export_translator": "decoding.translator",
}

__all__ = list(_EXPORTS)

# The modules whose names need the TensorFlow backend: training and decoding
# are written in TensorFlow ops (docs/design.md, "Public API").
_TENSORFLOW_ONLY = {"training": "transformer.training",
                    "decoding.translator": "transformer.decoding.translator"}


def _seams():
    """`transformer.seams`, which knows the backend and holds the one check of it."""
    return importlib.import_module(f"{__name__}.seams")


def _import_all() -> None:
    """Imports the modules of `_EXPORTS` and binds their names here. Their Keras
    classes, and through `transformer.seams` the kernels' (the optimizers
    `transformer.run.train` compiles models with), are then registered for loading."""
    tensorflow = _seams().KERNELS
    modules = {module: importlib.import_module(f"{__name__}.{module}")
               for module in dict.fromkeys(_EXPORTS.values())
               if tensorflow or module not in _TENSORFLOW_ONLY}  # they import TensorFlow
    for name, module in _EXPORTS.items():
        if module in modules:  # else asked for through __getattr__
            globals()[name] = getattr(modules[module], name)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _import_all()
    if _EXPORTS[name] in _TENSORFLOW_ONLY:
        _seams().require_tensorflow(f"{_TENSORFLOW_ONLY[_EXPORTS[name]]}.{name}")
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # the names of `_EXPORTS`, for readers and static tools
    from transformer.attention import (  # noqa: F401
        CausalSelfAttention,
        CrossAttention,
        EncoderDecoderAttention,
        EncoderSelfAttention,
        GlobalSelfAttention,
        MaskedDecoderSelfAttention,
        MultiHeadAttention,
        mask_value,
        scaled_dot_product_attention,
    )
    from transformer.constants import (  # noqa: F401
        END_ID,
        PAD_ID,
        RESERVED_TOKENS,
        START_ID,
        UNK_ID,
    )
    from transformer.decoding.strategies import Beam, Greedy, Sample, Strategy  # noqa: F401
    from transformer.decoding.translator import (  # noqa: F401
        Translation,
        Translator,
        export_translator,
    )
    from transformer.keras_interop import (  # noqa: F401
        copy_weights_from_keras,
        copy_weights_to_keras,
    )
    from transformer.layers import DecoderLayer, EncoderLayer, FeedForward  # noqa: F401
    from transformer.masking import (  # noqa: F401
        create_decoder_mask,
        create_look_ahead_mask,
        create_masks,
        create_padding_mask,
        to_keras_attention_mask,
    )
    from transformer.model import Decoder, Encoder, Transformer  # noqa: F401
    from transformer.model_config import PRESETS, TransformerConfig  # noqa: F401
    from transformer.positional import PositionalEmbedding, positional_encoding  # noqa: F401
    from transformer.training import (  # noqa: F401
        CustomSchedule,
        MaskedLoss,
        masked_accuracy,
        masked_loss,
    )
