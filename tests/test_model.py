import functools
import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_checks import (
    D_MODEL,
    DFF,
    MAX_LENGTH,
    NUM_HEADS,
    SOURCE_PADDING,
    SOURCE_STATES,
    SOURCE_TOKENS,
    TARGET_LEN,
    TARGET_TOKENS,
    VOCAB,
    check_layer,
)

from transformer import (
    PRESETS,
    Decoder,
    Encoder,
    MultiHeadAttention,
    Transformer,
    TransformerConfig,
)
from transformer.model import build_model


def _tiny(**kwargs):
    args = dict(num_layers=2, d_model=16, num_heads=4, dff=32, input_vocab_size=30,
                target_vocab_size=25, max_length=20, dropout_rate=0.1)
    args.update(kwargs)
    return Transformer(**args)


CONTEXT = tf.constant([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
TARGET = tf.constant([[2, 4, 5, 6], [2, 7, 0, 0]])


def test_transformer_logits_shape_and_weights_dict():
    keras.utils.set_random_seed(0)
    model = _tiny()
    logits, weights = model((CONTEXT, TARGET), return_attention_weights=True)
    assert logits.shape == (2, 4, 25) and logits.dtype == tf.float32
    assert sorted(weights) == sorted(
        ["encoder_layer1", "encoder_layer2", "decoder_layer1_block1", "decoder_layer1_block2",
         "decoder_layer2_block1", "decoder_layer2_block2"]
    )
    assert weights["encoder_layer1"].shape == (2, 4, 6, 6)
    assert weights["decoder_layer2_block1"].shape == (2, 4, 4, 4)
    assert weights["decoder_layer2_block2"].shape == (2, 4, 4, 6)
    # Source padding gets no encoder-decoder attention.
    np.testing.assert_array_equal(weights["decoder_layer1_block2"].numpy()[0, :, :, 4:], 0)


def test_changing_a_future_target_token_leaves_earlier_logits_unchanged():
    keras.utils.set_random_seed(1)
    model = _tiny()
    a = model((CONTEXT, TARGET), training=False).numpy()
    changed = tf.tensor_scatter_nd_update(TARGET, [[0, 3], [1, 2]], [20, 21])
    b = model((CONTEXT, changed), training=False).numpy()
    np.testing.assert_allclose(a[0, :3], b[0, :3], atol=1e-5)
    np.testing.assert_allclose(a[1, :2], b[1, :2], atol=1e-5)
    assert not np.allclose(a[0, 3], b[0, 3])


def test_padding_in_the_source_changes_nothing():
    keras.utils.set_random_seed(2)
    model = _tiny()
    a = model((CONTEXT, TARGET), training=False).numpy()
    # Tokens behind padding: extra padding columns leave every logit unchanged.
    longer = tf.pad(CONTEXT, [[0, 0], [0, 3]])
    b = model((longer, TARGET), training=False).numpy()
    np.testing.assert_allclose(a, b, atol=1e-5)
    # Changing the embedding of the padding id itself changes nothing either.
    table = model.encoder.pos_embedding.embedding.embeddings
    table.assign(tf.tensor_scatter_nd_update(table, [[0]], tf.ones((1, 16)) * 5.0))
    c = model((CONTEXT, TARGET), training=False).numpy()
    np.testing.assert_allclose(a[0], c[0], atol=1e-5)


def test_dropout_only_in_training():
    keras.utils.set_random_seed(3)
    model = _tiny(dropout_rate=0.3)
    a = model((CONTEXT, TARGET), training=False).numpy()
    b = model((CONTEXT, TARGET), training=False).numpy()
    c = model((CONTEXT, TARGET), training=True).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_keras_save_and_load_gives_identical_logits(tmp_path):
    keras.utils.set_random_seed(4)
    model = _tiny()
    model((CONTEXT, TARGET))
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, Transformer)
    np.testing.assert_array_equal(
        loaded((CONTEXT, TARGET)).numpy(), model((CONTEXT, TARGET)).numpy()
    )


def test_built_but_never_called_model_saves_and_loads(tmp_path):
    keras.utils.set_random_seed(5)
    model = build_model(TransformerConfig(num_layers=1, d_model=8, num_heads=2, dff=16,
                                          max_length=12), 30, 25)
    path = tmp_path / "fresh.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(
        loaded((CONTEXT, TARGET)).numpy(), model((CONTEXT, TARGET)).numpy()
    )


def test_transformer_config_round_trip():
    model = _tiny()
    clone = Transformer.from_config(model.get_config())
    assert clone.get_config() == model.get_config()


def test_a_deep_encoder_and_a_shallow_decoder_save_load_and_read_old_configs(tmp_path):
    """`num_decoder_layers` sets the decoder's depth apart from the encoder's;
    a config written before it existed builds the same depth for both."""
    keras.utils.set_random_seed(6)
    model = _tiny(num_layers=3, num_decoder_layers=1)
    assert (len(model.encoder.enc_layers), len(model.decoder.dec_layers)) == (3, 1)
    expected = model((CONTEXT, TARGET)).numpy()
    attention = model((CONTEXT, TARGET), return_attention_weights=True)[1]
    assert sorted(attention) == ["decoder_layer1_block1", "decoder_layer1_block2",
                                 "encoder_layer1", "encoder_layer2", "encoder_layer3"]
    path = tmp_path / "deep_shallow.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.config.decoder_layers == 1
    np.testing.assert_array_equal(loaded((CONTEXT, TARGET)).numpy(), expected)
    old = model.get_config()
    del old["num_decoder_layers"]
    assert len(Transformer.from_config(old).decoder.dec_layers) == 3
    config = TransformerConfig(num_layers=3, num_decoder_layers=1, d_model=16, num_heads=4,
                               dff=32)
    assert build_model(config, 30, 25).config == config
    assert TransformerConfig(num_layers=3).decoder_layers == 3
    with pytest.raises(ValueError, match="num_decoder_layers"):
        TransformerConfig(num_decoder_layers=0)


def _decoder_steps(decoder):
    cache, outputs = decoder.initial_cache(SOURCE_STATES), []
    for t in range(TARGET_LEN):
        out, _, cache = decoder(TARGET_TOKENS[:, :t + 1], padding_mask=SOURCE_PADDING,
                                training=False, cache=cache)
        outputs.append(out)
    return outputs


@pytest.mark.parametrize(
    "cls,args,cached_steps",
    [(Encoder, (SOURCE_TOKENS,), None), (Decoder, (TARGET_TOKENS, SOURCE_STATES), _decoder_steps)],
    ids=["encoder", "decoder"],
)
def test_stacks_pass_the_layer_checks(cls, args, cached_steps):
    """Two layers, post-norm and pre-norm: config round trip, saving, dropout only
    in training and, for the decoder, the cached steps (tests/layer_checks.py)."""
    for normalize_first in (False, True):
        config = TransformerConfig(num_layers=2, d_model=D_MODEL, num_heads=NUM_HEADS, dff=DFF,
                                   max_length=MAX_LENGTH, dropout_rate=0.2,
                                   normalize_first=normalize_first)
        layer = check_layer(
            functools.partial(cls, config, VOCAB),
            args, {"padding_mask": SOURCE_PADDING}, dropout=True, cached_steps=cached_steps,
            not_in_config=("embedding",),
        )
        assert layer.config is config


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_forward_is_finite(policy):
    keras.utils.set_random_seed(6)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        model = _tiny()
        logits, weights = model((CONTEXT, TARGET), return_attention_weights=True)
    finally:
        keras.config.set_dtype_policy(previous)
    assert logits.dtype == tf.float32
    assert np.isfinite(logits.numpy()).all()
    assert weights["encoder_layer1"].dtype == tf.as_dtype(policy.split("_")[1])
    assert all(np.isfinite(tf.cast(w, tf.float32).numpy()).all() for w in weights.values())


def test_too_long_input_is_a_clear_error():
    model = _tiny(max_length=5)
    with pytest.raises(ValueError, match="length 6.*`max_length`=5"):
        model((CONTEXT, TARGET))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"d_model": 18}, "divisor of `d_model`"),
        ({"num_layers": 0}, "num_layers=0"),
        ({"target_vocab_size": 0}, "target_vocab_size=0"),
        ({"input_vocab_size": -3}, "vocab_size=-3"),
    ],
)
def test_transformer_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _tiny(**kwargs)


def test_presets():
    tutorial = PRESETS["tutorial"]
    assert (tutorial.num_layers, tutorial.d_model, tutorial.num_heads, tutorial.dff,
            tutorial.dropout_rate) == (4, 128, 8, 512, 0.1)
    config = TransformerConfig.from_preset("tutorial", num_layers=2, dff=None)
    assert config.num_layers == 2 and config.dff == 512
    assert TransformerConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="preset='huge'"):
        TransformerConfig.from_preset("huge")
    with pytest.raises(ValueError, match="divisor"):
        TransformerConfig.from_preset("toy", num_heads=3)


NOT_A_DIVISOR = re.escape(
    "Received an invalid value for argument `num_heads`, expected a divisor of `d_model`. "
    "Received: d_model=10, num_heads=3"
)


def test_num_heads_must_divide_d_model():
    with pytest.raises(ValueError, match=NOT_A_DIVISOR):
        TransformerConfig(d_model=10, num_heads=3)
    with pytest.raises(ValueError, match=NOT_A_DIVISOR):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_heads_of_depth_d_model_over_num_heads(name):
    """The presets are validated at import; this checks what the built model does with them."""
    preset = PRESETS[name]
    model = build_model(preset, 11, 13)
    heads = [layer.self_attention.mha for layer in model.encoder.enc_layers] + [
        block.mha
        for layer in model.decoder.dec_layers
        for block in (layer.causal_self_attention, layer.cross_attention)
    ]
    assert len(heads) == 3 * preset.num_layers
    for mha in heads:
        assert (mha.num_heads, mha.depth) == (preset.num_heads, preset.d_model // preset.num_heads)
        assert mha.depth * mha.num_heads == preset.d_model
        assert tuple(mha.wq.kernel.shape) == (preset.d_model, preset.d_model)


def test_config_to_json_round_trip():
    config = TransformerConfig(num_layers=3, d_model=24, num_heads=6, dff=40,
                               dropout_rate=0.25, max_length=17)
    text = config.to_json()
    data = json.loads(text)
    assert data == {"num_layers": 3, "num_decoder_layers": None, "d_model": 24,
                    "num_heads": 6, "dff": 40, "dropout_rate": 0.25, "max_length": 17,
                    "tie_embeddings": False, "normalize_first": False}
    assert list(data) == sorted(data)  # written with sorted keys
    assert TransformerConfig.from_dict(data) == config
    # A config.json written before `normalize_first` existed is a post-norm model,
    # one written before `num_decoder_layers` has a decoder as deep as its encoder.
    del data["normalize_first"], data["num_decoder_layers"]
    assert TransformerConfig.from_dict(data) == config
    for preset in PRESETS.values():
        assert TransformerConfig.from_dict(json.loads(preset.to_json())) == preset


def test_config_from_dict_rejects_unknown_fields():
    data = json.loads(TransformerConfig().to_json())
    data.update({"heads": 4, "bogus": 1})
    with pytest.raises(ValueError, match=re.escape("Unknown TransformerConfig fields: ['bogus', 'heads']")):
        TransformerConfig.from_dict(data)


# -- tied embeddings (section 3.4) ----------------------------------------------


def test_tied_embeddings_share_one_matrix_for_both_embeddings_and_the_logits():
    keras.utils.set_random_seed(7)
    tied = _tiny(input_vocab_size=30, target_vocab_size=30, tie_embeddings=True)
    untied = _tiny(input_vocab_size=30, target_vocab_size=30)
    logits = tied((CONTEXT, TARGET), training=False)
    untied((CONTEXT, TARGET))
    table = tied.encoder.pos_embedding.embedding
    assert tied.decoder.pos_embedding.embedding is table
    # One 30 x 16 table less, and no 16 x 30 kernel nor 30 biases.
    assert untied.count_params() - tied.count_params() == 30 * 16 + 16 * 30 + 30
    assert not tied.final_layer.weights
    # The logits are the decoder's output times the table, transposed.
    hidden, _ = tied.decoder(TARGET, tied.encoder(CONTEXT)[0],
                             padding_mask=tf.cast(CONTEXT == 0, tf.float32)[:, None, None, :])
    expected = hidden.numpy() @ table.embeddings.numpy().T
    np.testing.assert_allclose(logits.numpy(), expected, atol=1e-5)
    # A change of the table moves the encoder's input, the decoder's input and the logits.
    table.embeddings.assign(table.embeddings + 0.01)
    assert not np.allclose(tied((CONTEXT, TARGET), training=False).numpy(), logits.numpy())


def test_tied_embeddings_get_one_gradient_from_all_three_uses():
    keras.utils.set_random_seed(8)
    model = _tiny(input_vocab_size=30, target_vocab_size=30, tie_embeddings=True)
    model((CONTEXT, TARGET))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model((CONTEXT, TARGET), training=False) ** 2)
    names = [v.path for v in model.trainable_variables]
    assert sum("embedding" in name for name in names) == 1
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)
    table = model.encoder.pos_embedding.embedding.embeddings
    tied_grad = tf.convert_to_tensor(grads[[v.path for v in model.trainable_variables].index(
        table.path)])
    # The same weights untied: the table copied into both embeddings and, transposed
    # and without bias, into the output layer. The tied gradient is the sum of the
    # three separate gradients.
    untied = _tiny(input_vocab_size=30, target_vocab_size=30)
    untied((CONTEXT, TARGET))
    by_path = {v.path.split("/", 1)[1]: v for v in untied.weights}
    for variable in model.weights:
        by_path[variable.path.split("/", 1)[1]].assign(variable)
    untied.decoder.pos_embedding.embedding.embeddings.assign(table)
    untied.final_layer.kernel.assign(tf.transpose(table))
    untied.final_layer.bias.assign(tf.zeros_like(untied.final_layer.bias))
    with tf.GradientTape() as tape:
        untied_loss = tf.reduce_sum(untied((CONTEXT, TARGET), training=False) ** 2)
    np.testing.assert_allclose(untied_loss.numpy(), loss.numpy(), rtol=1e-5)
    uses = [untied.encoder.pos_embedding.embedding.embeddings,
            untied.decoder.pos_embedding.embedding.embeddings, untied.final_layer.kernel]
    encoder_grad, decoder_grad, output_grad = tape.gradient(untied_loss, uses)
    parts = [tf.convert_to_tensor(encoder_grad), tf.convert_to_tensor(decoder_grad),
             tf.transpose(output_grad)]
    assert all(float(tf.reduce_max(tf.abs(part))) > 0 for part in parts)
    np.testing.assert_allclose(tied_grad.numpy(), sum(parts).numpy(), rtol=1e-4, atol=1e-5)


def test_tied_projection_is_one_2d_product_and_keeps_the_static_shape():
    """The logits of every position come from one 2-D `MatMul` with the table,
    not a broadcast batch product (several times slower without oneDNN); the
    output keeps the known dimensions and the vocabulary."""
    keras.utils.set_random_seed(10)
    model = _tiny(input_vocab_size=30, target_vocab_size=30, tie_embeddings=True)
    model((CONTEXT, TARGET))
    projection = model.final_layer
    traced = tf.function(projection).get_concrete_function(
        tf.TensorSpec((None, None, 16), tf.float32))
    ops_used = {op.type for op in traced.graph.get_operations()}
    assert "MatMul" in ops_used
    assert not ops_used & {"BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"}
    assert traced.structured_outputs.shape.as_list() == [None, None, 30]
    x = tf.random.normal((2, 3, 16))
    table = model.encoder.pos_embedding.embedding.embeddings.numpy()
    np.testing.assert_allclose(projection(x).numpy(), x.numpy() @ table.T, atol=1e-5)
    np.testing.assert_allclose(projection(x[:, 0]).numpy(), x[:, 0].numpy() @ table.T,
                               atol=1e-5)  # (batch, d_model), as in cached decoding


def test_tied_model_saves_and_loads_with_the_sharing(tmp_path):
    keras.utils.set_random_seed(9)
    model = _tiny(input_vocab_size=30, target_vocab_size=30, tie_embeddings=True)
    model((CONTEXT, TARGET))
    path = tmp_path / "tied.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.config.tie_embeddings
    assert loaded.decoder.pos_embedding.embedding is loaded.encoder.pos_embedding.embedding
    np.testing.assert_array_equal(
        loaded((CONTEXT, TARGET)).numpy(), model((CONTEXT, TARGET)).numpy()
    )
    assert Transformer.from_config(model.get_config()).get_config() == model.get_config()


def test_tied_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError, match=re.escape(
            "input_vocab_size=30, target_vocab_size=25")):
        _tiny(tie_embeddings=True)
    with pytest.raises(ValueError, match=re.escape("expected (25, 16)")):
        Decoder(TransformerConfig(num_layers=1, d_model=16, num_heads=4, dff=32), vocab_size=25,
                embedding=keras.layers.Embedding(30, 16))


def test_pre_norm_model_closes_each_stack_with_a_layer_norm_and_saves(tmp_path):
    keras.utils.set_random_seed(6)
    model = _tiny(normalize_first=True, dropout_rate=0.0)
    logits = model((CONTEXT, TARGET))
    post = _tiny(dropout_rate=0.0)
    post((CONTEXT, TARGET))
    def paths(m):  # without the model's own name
        return {w.path.split("/", 1)[1] for w in m.weights}

    assert paths(model) - paths(post) == {f"{s}/final_layernorm/{v}"
                                          for s in ("encoder", "decoder")
                                          for v in ("gamma", "beta")}
    context, _ = model.encoder(CONTEXT)
    np.testing.assert_allclose(context.numpy().mean(-1), 0, atol=1e-5)  # normalized output
    path = tmp_path / "pre.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.config.normalize_first
    np.testing.assert_array_equal(loaded((CONTEXT, TARGET)).numpy(), logits.numpy())
    config = TransformerConfig(num_layers=1, d_model=8, num_heads=2, dff=16, max_length=12,
                               normalize_first=True)
    assert build_model(config, 30, 25).config.normalize_first
