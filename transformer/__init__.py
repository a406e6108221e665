"""A tutorial-faithful Transformer for machine translation in TensorFlow and Keras 3.

The public names are listed in docs/design.md; see each module for the math.
"""

from transformer.attention import (
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
from transformer.constants import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from transformer.keras_interop import copy_weights_from_keras, copy_weights_to_keras
from transformer.layers import DecoderLayer, EncoderLayer, FeedForward
from transformer.masking import (
    create_decoder_mask,
    create_look_ahead_mask,
    create_masks,
    create_padding_mask,
    to_keras_attention_mask,
)
from transformer.model import PRESETS, Decoder, Encoder, Transformer, TransformerConfig
from transformer.positional import PositionalEmbedding, positional_encoding
from transformer.training import CustomSchedule, MaskedLoss, masked_accuracy, masked_loss
from transformer.translate import Translator, export_translator

__all__ = [
    "PAD_ID",
    "UNK_ID",
    "START_ID",
    "END_ID",
    "RESERVED_TOKENS",
    "positional_encoding",
    "PositionalEmbedding",
    "create_padding_mask",
    "create_look_ahead_mask",
    "create_decoder_mask",
    "create_masks",
    "to_keras_attention_mask",
    "scaled_dot_product_attention",
    "mask_value",
    "MultiHeadAttention",
    "copy_weights_to_keras",
    "copy_weights_from_keras",
    "EncoderSelfAttention",
    "MaskedDecoderSelfAttention",
    "EncoderDecoderAttention",
    "GlobalSelfAttention",
    "CausalSelfAttention",
    "CrossAttention",
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "Transformer",
    "TransformerConfig",
    "PRESETS",
    "CustomSchedule",
    "MaskedLoss",
    "masked_loss",
    "masked_accuracy",
    "Translator",
    "export_translator",
]
