"""Encoder, Decoder and the Transformer (section 3.1 of Vaswani et al., 2017).

Their hyperparameters and the project's presets are `transformer.model_config`.

Data flows tokens -> `PositionalEmbedding` -> `Encoder` -> `Decoder` -> logits.
"""

from __future__ import annotations

import keras
from keras import ops

from transformer import seams
from transformer._validation import check_positive_int
from transformer.constants import DEFAULT_MAX_LENGTH, LAYER_NORM_EPSILON
from transformer.layers import DecoderLayer, EncoderLayer
from transformer.masking import create_padding_mask
from transformer.model_config import TransformerConfig
from transformer.positional import PositionalEmbedding


class _Stack(keras.layers.Layer):
    """What the encoder and the decoder share: the hyperparameters of a
    `TransformerConfig`, the embedding, its dropout and, after pre-norm
    layers, the closing layer norm; `get_config` writes the config once."""

    def __init__(self, config, vocab_size, embedding=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):  # as `get_config` writes it
            config = TransformerConfig.from_dict(config)
        if not isinstance(config, TransformerConfig):
            raise TypeError(
                "Received a config that is not a TransformerConfig. Expected "
                "transformer.TransformerConfig (e.g. TransformerConfig.from_preset('tutorial')). "
                f"Received: config={config!r}"
            )
        check_positive_int("vocab_size", vocab_size)
        self.config = config  # frozen: checked once, when it was made
        self.vocab_size = vocab_size
        policy = self.dtype_policy
        self.pos_embedding = PositionalEmbedding(
            vocab_size, config.d_model, config.max_length, embedding=embedding, dtype=policy,
            name="pos_embedding",
        )
        self.dropout = seams.Dropout(config.dropout_rate, dtype=policy)
        # Pre-norm sublayers leave the sum unnormalized: one layer norm closes the stack.
        self.final_layernorm = seams.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, dtype=policy, name="final_layernorm"
        ) if config.normalize_first else None

    def _layer_arguments(self):
        """The arguments every `EncoderLayer` or `DecoderLayer` of the stack takes."""
        config = self.config
        return dict(d_model=config.d_model, num_heads=config.num_heads, dff=config.dff,
                    dropout_rate=config.dropout_rate, normalize_first=config.normalize_first,
                    dtype=self.dtype_policy)

    def _layers_built(self, hidden_shape):
        if self.final_layernorm is not None:
            self.final_layernorm.build(hidden_shape)
        self.built = True

    def _close(self, x):
        """The stack's output: `x`, or `LayerNorm(x)` after pre-norm layers."""
        return x if self.final_layernorm is None else self.final_layernorm(x)

    def compute_output_shape(self, x_shape, *args, **kwargs):
        return (*tuple(x_shape), self.config.d_model)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict(),
                "vocab_size": self.vocab_size}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "config" not in config:
            # Written before the stacks took a TransformerConfig: its fields, flat.
            fields = {name: config.pop(name) for name in _STACK_FIELDS if name in config}
            layers = fields.pop("num_layers")
            key = "num_decoder_layers" if cls is Decoder else "num_layers"
            fields = {"num_layers": layers, key: layers, **fields}
            config["config"] = TransformerConfig(**fields)
        return cls(**config)


# The hyperparameters that `Encoder` and `Decoder` wrote one by one before they
# took a `TransformerConfig` (their `vocab_size` is kept beside the config).
_STACK_FIELDS = ("num_layers", "d_model", "num_heads", "dff", "max_length", "dropout_rate",
                 "normalize_first")


@keras.saving.register_keras_serializable(package="transformer")
class Encoder(_Stack):
    """The encoder: embedding, positional encoding, dropout and `num_layers` layers.

    Args:
        config: a `TransformerConfig`: `num_layers`, `d_model`, `num_heads`,
            `dff`, `max_length` (the longest source sequence),
            `dropout_rate` (after the embedding and on every sublayer
            output) and `normalize_first` (pre-norm layers, see
            `transformer.layers`, with one more layer norm on the stack's
            output).
        vocab_size: source vocabulary size.
        embedding: an existing `keras.layers.Embedding` to share (section
            3.4), or None for the layer's own; see `PositionalEmbedding`.

    Call arguments:
        x: int source tokens `(batch, input_len)`; id 0 is padding.
        padding_mask: optional `(batch, 1, 1, input_len)`, 1 at padding (not
            allowed). Built from the token ids when omitted.
        training: whether dropout is active.

    Returns:
        `(output, attention_weights)`: `(batch, input_len, d_model)` and a dict
        `{"encoder_layer{i}": (batch, num_heads, input_len, input_len)}`, i from 1.

    Example:

    >>> import numpy as np
    >>> encoder = Encoder(TransformerConfig(num_layers=2, d_model=16, num_heads=2, dff=32),
    ...                   vocab_size=50)
    >>> output, weights = encoder(np.array([[5, 6, 7, 0]]))
    >>> tuple(output.shape), sorted(weights)
    ((1, 4, 16), ['encoder_layer1', 'encoder_layer2'])
    """

    def __init__(self, config, vocab_size, embedding=None, **kwargs):
        super().__init__(config, vocab_size, embedding, **kwargs)
        self.enc_layers = [
            EncoderLayer(**self._layer_arguments(), name=f"encoder_layer{i + 1}")
            for i in range(self.config.num_layers)
        ]

    def build(self, x_shape):
        self.pos_embedding.build(x_shape)
        hidden_shape = (*tuple(x_shape), self.config.d_model)
        for layer in self.enc_layers:
            layer.build(hidden_shape)
        self._layers_built(hidden_shape)

    def call(self, x, padding_mask=None, training=None):
        if padding_mask is None:
            padding_mask = create_padding_mask(x)  # (batch, 1, 1, input_len)
        x = self.pos_embedding(x)  # (batch, input_len, d_model)
        x = self.dropout(x, training=training)
        attention_weights = {}
        for i, layer in enumerate(self.enc_layers):
            x, weights = layer(x, padding_mask=padding_mask, training=training)
            attention_weights[f"encoder_layer{i + 1}"] = weights
        return self._close(x), attention_weights


@keras.saving.register_keras_serializable(package="transformer")
class Decoder(_Stack):
    """The decoder: embedding, positional encoding, dropout and `num_layers` layers.

    Args:
        config: a `TransformerConfig`: its `decoder_layers` layers (its
            `num_decoder_layers`, or `num_layers`), `d_model`, `num_heads`,
            `dff`, `max_length` (the longest target sequence), `dropout_rate`
            and `normalize_first`, as for `Encoder`.
        vocab_size: target vocabulary size.
        embedding: an existing `keras.layers.Embedding` to share (section
            3.4), or None for the layer's own; see `PositionalEmbedding`.

    Call arguments:
        x: int target tokens `(batch, target_len)` (right-shifted, starting with
            `[START]`); id 0 is padding.
        context: encoder output `(batch, input_len, d_model)`.
        padding_mask: optional `(batch, 1, 1, input_len)`, 1 at source padding.
            The decoder's own look-ahead and target-padding mask is built from `x`.
        training: whether dropout is active.
        cache: optional, for incremental decoding: one dict per layer from
            `initial_cache(context)` (or from the previous step). `x` is then
            every token so far, `(batch, t + 1)`; only the newest is embedded
            (at position `t`) and run through the layers, which read the
            earlier positions' keys and values from the cache; `context` is
            not used. This is the same function as the full call at
            inference, one position at a time.

    Returns:
        `(output, attention_weights)`: `(batch, target_len, d_model)` and a dict
        with `decoder_layer{i}_block1` (masked self-attention,
        `(batch, heads, target_len, target_len)`) and `decoder_layer{i}_block2`
        (encoder-decoder attention, `(batch, heads, target_len, input_len)`).
        With a cache: `(output, attention_weights, cache)`, where output is
        the newest position's `(batch, d_model)`, the weights have one query
        row, and the cache has grown by one position.
    """

    def __init__(self, config, vocab_size, embedding=None, **kwargs):
        super().__init__(config, vocab_size, embedding, **kwargs)
        self.dec_layers = [
            DecoderLayer(**self._layer_arguments(), name=f"decoder_layer{i + 1}")
            for i in range(self.config.decoder_layers)
        ]

    def build(self, x_shape, context_shape):
        self.pos_embedding.build(x_shape)
        hidden_shape = (*tuple(x_shape), self.config.d_model)
        for layer in self.dec_layers:
            layer.build(hidden_shape, context_shape)
        self._layers_built(hidden_shape)

    def call(self, x, context=None, padding_mask=None, training=None, cache=None):
        target_padding = create_padding_mask(x)  # (batch, 1, 1, target_len)
        if cache is not None:
            # Only the newest token, at its position; kept 2-D, so that every
            # Dense sublayer is a single matrix product.
            position = ops.shape(x)[1] - 1
            x = self.pos_embedding(x[:, -1:], start_position=position)  # (batch, 1, d_model)
            x = ops.reshape(x, (-1, self.config.d_model))  # (batch, d_model)
        else:
            x = self.pos_embedding(x)  # (batch, target_len, d_model)
        x = self.dropout(x, training=training)
        attention_weights, new_cache = {}, []
        for i, layer in enumerate(self.dec_layers):
            outputs = layer(
                x,
                context,
                look_ahead_mask=target_padding,
                padding_mask=padding_mask,
                training=training,
                cache=None if cache is None else cache[i],
            )
            x, block1, block2 = outputs[:3]
            new_cache.extend(outputs[3:])
            attention_weights[f"decoder_layer{i + 1}_block1"] = block1
            attention_weights[f"decoder_layer{i + 1}_block2"] = block2
        x = self._close(x)
        if cache is not None:
            return x, attention_weights, new_cache
        return x, attention_weights

    def initial_cache(self, context):
        """Every layer's cache before the first token (see `DecoderLayer.initial_cache`)."""
        return [layer.initial_cache(context) for layer in self.dec_layers]


@keras.saving.register_keras_serializable(package="transformer")
class TiedOutputProjection(keras.layers.Layer):
    """The pre-softmax linear transformation with the embedding's weights (section 3.4).

    "We share the same weight matrix between the two embedding layers and the
    pre-softmax linear transformation": `logits = x @ E^T`, where `E` is the
    `(vocab_size, d_model)` table of a `keras.layers.Embedding`. The layer has
    no weights of its own (no bias), so the table is saved once, with the
    embedding; `Transformer(tie_embeddings=True)` rebuilds the sharing when it
    is loaded.

    Args:
        embedding: the `keras.layers.Embedding` whose table is used.

    Call arguments:
        x: `(..., d_model)`.

    Returns:
        Logits `(..., vocab_size)` in the layer's compute dtype.
    """

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        # Not tracked as a sublayer: the embedding belongs to (and is saved
        # with) the layer that embeds the tokens.
        object.__setattr__(self, "_embedding", embedding)
        self.units = embedding.input_dim

    def call(self, x):
        table = ops.cast(self._embedding.embeddings, self.compute_dtype)  # (vocab, d_model)
        # One 2-D product over all positions: on a 3-D `x`, TensorFlow's matmul
        # runs a broadcast batch product, which without oneDNN (CPUs without
        # AVX-512) took several times as long (BENCHMARKS.md, "Training speed").
        rows = ops.reshape(x, (-1, self._embedding.output_dim))  # (positions, d_model)
        logits = seams.matmul_transposed(rows, table)  # (positions, vocab)
        return ops.reshape(logits, (*ops.shape(x)[:-1], self.units))  # (..., vocab)

    def compute_output_shape(self, input_shape):
        return (*tuple(input_shape)[:-1], self.units)


@keras.saving.register_keras_serializable(package="transformer")
class Transformer(keras.Model):
    """The Transformer of Vaswani et al., 2017 (section 3, figure 1).

    Args:
        num_layers: layers in the encoder, and in the decoder unless
            `num_decoder_layers` is given (`N`).
        d_model: model width.
        num_heads: attention heads (`h`); must divide `d_model`.
        dff: inner width of the feed-forward networks.
        input_vocab_size: source vocabulary size.
        target_vocab_size: target vocabulary size.
        max_length: longest source or target sequence (rows of the positional
            encoding); a longer input is a `ValueError` naming both lengths.
        dropout_rate: `P_drop`.
        tie_embeddings: share one weight matrix between the source embedding,
            the target embedding and the pre-softmax linear transformation
            (section 3.4). Needs one vocabulary for both languages
            (`input_vocab_size == target_vocab_size`, e.g. a shared
            SentencePiece model); `final_layer` is then a
            `TiedOutputProjection`, without a bias.
        normalize_first: pre-norm sublayers, `x + Dropout(sublayer(LayerNorm(x)))`,
            and a layer norm on the encoder's and the decoder's output, instead
            of the paper's post-norm (see `transformer.layers`).
        num_decoder_layers: layers in the decoder; None: `num_layers`. A deep
            encoder with a shallow decoder (Kasai et al., 2021) trains and
            decodes faster for about the same quality.

    The hyperparameters are kept as one frozen `TransformerConfig`,
    `model.config`, which the encoder and the decoder take;
    `build_model(config, input_vocab_size, target_vocab_size)` builds the
    model of a config.

    Call arguments:
        inputs: a tuple `(context, x)`: int source tokens `(batch, input_len)` and
            int right-shifted target tokens `(batch, target_len)`; id 0 is padding
            in both, and the masks are built from the ids.
        training: whether dropout is active.
        return_attention_weights: also return every layer's attention weights.

    Returns:
        float32 logits `(batch, target_len, target_vocab_size)`, or
        `(logits, attention_weights)` with the dict keys `encoder_layer{i}`,
        `decoder_layer{i}_block1`, `decoder_layer{i}_block2`, each
        `(batch, num_heads, seq_q, seq_k)`.

    Example:

    >>> import numpy as np
    >>> model = Transformer(num_layers=2, d_model=32, num_heads=4, dff=64,
    ...                     input_vocab_size=100, target_vocab_size=90)
    >>> tuple(model((np.array([[5, 6, 7, 0]]), np.array([[2, 8, 9]]))).shape)
    (1, 3, 90)
    """

    def __init__(
        self,
        num_layers,
        d_model,
        num_heads,
        dff,
        input_vocab_size,
        target_vocab_size,
        max_length=DEFAULT_MAX_LENGTH,
        dropout_rate=0.1,
        tie_embeddings=False,
        normalize_first=False,
        num_decoder_layers=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # The hyperparameters, checked once and frozen; the encoder and the
        # decoder take them as they are.
        self.config = TransformerConfig(
            num_layers=num_layers, num_decoder_layers=num_decoder_layers, d_model=d_model,
            num_heads=num_heads, dff=dff, max_length=max_length, dropout_rate=dropout_rate,
            tie_embeddings=bool(tie_embeddings), normalize_first=bool(normalize_first),
        )
        check_positive_int("input_vocab_size", input_vocab_size)
        check_positive_int("target_vocab_size", target_vocab_size)
        if tie_embeddings and input_vocab_size != target_vocab_size:
            raise ValueError(
                "Received `tie_embeddings=True` with two vocabularies, expected one shared "
                "vocabulary (input_vocab_size == target_vocab_size). Received: "
                f"input_vocab_size={input_vocab_size}, target_vocab_size={target_vocab_size}"
            )
        self.input_vocab_size = input_vocab_size
        self.target_vocab_size = target_vocab_size
        policy = self.dtype_policy
        self.encoder = Encoder(self.config, input_vocab_size, dtype=policy, name="encoder")
        shared = self.encoder.pos_embedding.embedding if self.config.tie_embeddings else None
        self.decoder = Decoder(self.config, target_vocab_size, embedding=shared, dtype=policy,
                               name="decoder")
        if self.config.tie_embeddings:
            self.final_layer = TiedOutputProjection(shared, dtype=policy, name="final_layer")
        else:
            self.final_layer = keras.layers.Dense(
                target_vocab_size, dtype=policy, name="final_layer"
            )

    def build(self, input_shape):
        context_shape, x_shape = input_shape
        self.encoder.build(context_shape)
        d_model = self.config.d_model
        self.decoder.build(x_shape, (*tuple(context_shape), d_model))
        self.final_layer.build((*tuple(x_shape), d_model))
        self.built = True

    def call(self, inputs, training=None, return_attention_weights=False):
        context_tokens, x = inputs
        padding_mask = create_padding_mask(context_tokens)  # (batch, 1, 1, input_len)
        context, enc_weights = self.encoder(
            context_tokens, padding_mask=padding_mask, training=training
        )  # (batch, input_len, d_model)
        x, dec_weights = self.decoder(
            x, context, padding_mask=padding_mask, training=training
        )  # (batch, target_len, d_model)
        logits = self.final_layer(x)  # (batch, target_len, target_vocab_size)
        # Losses and softmax stay in float32 under mixed precision.
        logits = ops.cast(logits, "float32")
        if return_attention_weights:
            return logits, {**enc_weights, **dec_weights}
        return logits

    # --- The two halves that decoding needs (section 3: "the encoder maps an
    # input sequence ... Given z, the decoder then generates an output
    # sequence ... one element at a time"). Decoding calls only these three.

    def encode(self, source_tokens, training=False):
        """The encoder half: the source's representation and its padding mask.

        Args:
            source_tokens: int source tokens `(batch, input_len)`, 0 = padding.
            training: whether dropout is active.

        Returns:
            `(context, padding_mask)`: the encoder output `(batch, input_len,
            d_model)` and `(batch, 1, 1, input_len)`, 1 at padding (not allowed).
        """
        padding_mask = create_padding_mask(source_tokens)  # (batch, 1, 1, input_len)
        context, _ = self.encoder(source_tokens, padding_mask=padding_mask, training=training)
        return context, padding_mask  # (batch, input_len, d_model)

    def initial_cache(self, context, padding_mask):
        """What incremental decoding starts from, in two parts.

        Args:
            context, padding_mask: from `encode`.

        Returns:
            `(cache, memory)`. `cache` grows by one position per step: one
            `(k_heads, v_heads)` pair per decoder layer, the masked
            self-attention's keys and values, each `(batch, num_heads, 0,
            depth)` before the first token. `memory` stays the same for a
            sentence: `{"cross": [(k_heads, v_heads), ...], "padding_mask":
            padding_mask}`, the encoder output projected once per layer for
            encoder-decoder attention, each `(batch, num_heads, input_len,
            depth)`. A beam search reorders the rows of `cache` and never
            those of `memory`.
        """
        layers = self.decoder.initial_cache(context)
        cache = [layer["self"] for layer in layers]
        memory = {"cross": [layer["cross"] for layer in layers], "padding_mask": padding_mask}
        return cache, memory

    def decode_step(self, tokens, cache, memory, training=False):
        """The decoder half, one position: the next token's logits and the grown cache.

        Computes what `self((source, tokens))[:, -1]` computes, for the newest
        position only: `Decoder.call` with a cache embeds the last token at its
        position and runs it through every layer, whose attention layers read
        (and extend) the cached keys and values.

        Args:
            tokens: int64 `(batch, t + 1)`, every token so far, `[START]` first.
            cache, memory: from `initial_cache`, or `cache` from the previous step.
            training: whether dropout is active.

        Returns:
            `(logits, cache)`: float32 `(batch, target_vocab_size)` for token
            `t + 1`, and the cache grown by one position.
        """
        layers = [{"self": own, "cross": cross} for own, cross in
                  zip(cache, memory["cross"], strict=True)]
        x, _, layers = self.decoder(
            tokens, None, padding_mask=memory["padding_mask"], training=training, cache=layers
        )  # (batch, d_model)
        logits = self.final_layer(x)  # (batch, target_vocab_size)
        return ops.cast(logits, "float32"), [layer["self"] for layer in layers]

    def get_config(self):
        # The config's fields flat, as the constructor takes them: `.keras`
        # files of every version load with `cls(**config)`.
        return {**super().get_config(), **self.config.to_dict(),
                "input_vocab_size": self.input_vocab_size,
                "target_vocab_size": self.target_vocab_size}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def build_model(config: TransformerConfig, input_vocab_size: int, target_vocab_size: int,
                **kwargs) -> Transformer:
    """A `Transformer` of `config`'s hyperparameters, built (its weights exist)."""
    model = Transformer(input_vocab_size=input_vocab_size, target_vocab_size=target_vocab_size,
                        **config.to_dict(), **kwargs)
    model.build(((None, None), (None, None)))
    return model
