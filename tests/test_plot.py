"""Tests of the transformer/plot/ package: every function returns a Figure with the right
axes, labels and data, and bad input gets a clear error."""

import io
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

# Imported plainly: a broken project module is a failure here, not a skip.
from transformer import masking, plot, positional, training  # noqa: E402

SRC = ["[START]", "o", "gato", "preto", "dorme", "[END]"]
TGT = ["the", "black", "cat", "sleeps", "[END]"]
COLORBAR = "<colorbar>"  # the label matplotlib gives every colour bar axes


def main_axes(fig):
    return [ax for ax in fig.axes if ax.get_label() != COLORBAR]


def colorbar_axes(fig):
    return [ax for ax in fig.axes if ax.get_label() == COLORBAR]


def texts(labels):
    return [label.get_text() for label in labels]


def rendered(fig):
    """Renders the figure to PNG (catching layout and drawing errors) and returns it."""
    assert isinstance(fig, Figure)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")
    return fig


def image_data(ax):
    assert len(ax.images) == 1
    return np.asarray(ax.images[0].get_array())


def paper_schedule(d_model, warmup, steps):
    steps = np.asarray(steps, dtype=np.float64)
    return d_model**-0.5 * np.minimum(steps**-0.5, steps * warmup**-1.5)


class NumpySchedule:
    """The paper's schedule in numpy, vectorised, with the attributes CustomSchedule has."""

    def __init__(self, d_model=128, warmup_steps=4000):
        self.d_model = d_model
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        return paper_schedule(self.d_model, self.warmup_steps, step)


class ScalarOnlySchedule(NumpySchedule):
    """A schedule that refuses arrays, as some hand-written schedules do."""

    def __call__(self, step):
        if np.ndim(step) != 0:
            raise TypeError("only scalars")
        return float(paper_schedule(self.d_model, self.warmup_steps, step))


# -------------------------------------------------------------- positional encoding


def test_positional_encoding_from_array_is_a_heatmap_of_position_by_depth():
    rng = np.random.default_rng(0)
    encoding = rng.uniform(-1, 1, size=(12, 8)).astype(np.float32)
    fig = rendered(plot.plot_positional_encoding(encoding[np.newaxis]))  # (1, length, depth)
    (ax,) = main_axes(fig)
    assert len(colorbar_axes(fig)) == 1
    np.testing.assert_allclose(image_data(ax), encoding, rtol=1e-6)
    assert "Depth" in ax.get_xlabel()
    assert ax.get_ylabel() == "Position"
    assert "length=12, depth=8" in ax.get_title()


def test_positional_encoding_from_length_and_depth_is_the_library_s():
    expected = positional.positional_encoding(50, 16)
    for fig in (plot.plot_positional_encoding(50, 16), plot.plot_positional_encoding((50, 16))):
        (ax,) = main_axes(rendered(fig))
        np.testing.assert_allclose(image_data(ax), expected, rtol=1e-6)


def test_positional_encoding_bad_input():
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        plot.plot_positional_encoding(np.zeros(5))
    with pytest.raises(ValueError, match="`depth`.*depth=0"):
        plot.plot_positional_encoding(10, 0)


# ---------------------------------------------------------------------------- masks


def test_look_ahead_mask_has_ones_above_the_diagonal_and_says_so():
    size = 5
    look_ahead = np.triu(np.ones((size, size)), k=1)  # query i cannot see keys j > i
    tokens = TGT
    fig = rendered(plot.plot_mask(look_ahead, "look-ahead mask", tokens))
    (ax,) = main_axes(fig)
    (cbar,) = colorbar_axes(fig)
    data = image_data(ax)
    np.testing.assert_array_equal(data, look_ahead)
    # Drawn as printed: row 0 (first query) at the top, so the 1s are upper right.
    assert ax.images[0].origin == "upper"
    assert data[0, size - 1] == 1 and data[size - 1, 0] == 0
    assert texts(ax.get_xticklabels()) == tokens
    assert texts(ax.get_yticklabels()) == tokens
    assert "key" in ax.get_xlabel() and "query" in ax.get_ylabel()
    assert ax.get_title() == "look-ahead mask"
    assert texts(cbar.get_yticklabels()) == ["allowed (0)", "masked (1)"]


def test_mask_from_the_library_functions():
    fig = rendered(plot.plot_mask(masking.create_look_ahead_mask(4)))
    np.testing.assert_array_equal(image_data(main_axes(fig)[0]), np.triu(np.ones((4, 4)), k=1))
    tokens = np.array([[2, 7, 9, 3, 0, 0]])
    fig = rendered(plot.plot_mask(masking.create_padding_mask(tokens)))
    expected = np.tile([0, 0, 0, 0, 1, 1], (6, 1))
    np.testing.assert_array_equal(image_data(main_axes(fig)[0]), expected)


def test_padding_mask_is_selected_from_the_batch_and_repeated_over_queries():
    padding = np.array([[0, 0, 1, 1], [0, 0, 0, 1]], dtype=np.float32)[:, None, None, :]
    fig = rendered(plot.plot_mask(padding, batch_index=1))
    np.testing.assert_array_equal(image_data(main_axes(fig)[0]), np.tile([0, 0, 0, 1], (4, 1)))
    # Cross-attention: 3 queries over 4 keys.
    fig = rendered(plot.plot_mask(padding, tokens=SRC[:4], query_tokens=TGT[:3], batch_index=0))
    (ax,) = main_axes(fig)
    np.testing.assert_array_equal(image_data(ax), np.tile([0, 0, 1, 1], (3, 1)))
    assert texts(ax.get_xticklabels()) == SRC[:4]
    assert texts(ax.get_yticklabels()) == TGT[:3]
    with pytest.raises(ValueError, match="`batch_index`.*batch of 2.*batch_index=2"):
        plot.plot_mask(padding, batch_index=2)


def test_boolean_masks_and_masks_with_a_batch_of_one_are_accepted():
    mask = np.triu(np.ones((3, 3), dtype=bool), k=1)[None, None]  # (1, 1, 3, 3)
    fig = rendered(plot.plot_mask(mask, batch_index=5))  # a batch axis of 1 broadcasts
    np.testing.assert_array_equal(image_data(main_axes(fig)[0]), mask[0, 0].astype(float))


def test_mask_bad_input():
    additive = np.triu(np.ones((3, 3)), k=1) * -1e9
    with pytest.raises(ValueError, match="0s and 1s \\(1 = masked"):
        plot.plot_mask(additive)
    with pytest.raises(ValueError, match=r"Received 3 `tokens` for a mask with 4 keys"):
        plot.plot_mask(np.zeros((4, 4)), tokens=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"shape \(1, 1, 1, 1, 4\)"):
        plot.plot_mask(np.zeros((1, 1, 1, 1, 4)))
    with pytest.raises(ValueError, match="not a single string"):
        plot.plot_mask(np.zeros((3, 3)), tokens="o gato preto")


def test_plot_masks_shows_padding_look_ahead_and_combined():
    padding = np.array([[0, 0, 0, 1, 1]], dtype=np.float32)[:, None, None, :]  # (1, 1, 1, 5)
    look_ahead = np.triu(np.ones((5, 5)), k=1)  # (5, 5)
    combined = np.maximum(padding, look_ahead)  # (1, 1, 5, 5)
    tokens = ["[START]", "the", "cat", "[PAD]", "[PAD]"]
    fig = rendered(plot.plot_masks(padding, look_ahead, combined, tokens=tokens))
    axes = main_axes(fig)
    assert len(axes) == 3
    assert len(colorbar_axes(fig)) == 1
    assert [ax.get_title().split("\n")[0] for ax in axes] == [
        "padding mask",
        "look-ahead mask",
        "combined mask",
    ]
    np.testing.assert_array_equal(image_data(axes[0]), np.tile(padding[0, 0], (5, 1)))
    np.testing.assert_array_equal(image_data(axes[1]), look_ahead)
    np.testing.assert_array_equal(image_data(axes[2]), combined[0, 0])
    for ax in axes:
        assert texts(ax.get_xticklabels()) == tokens
        assert texts(ax.get_yticklabels()) == tokens
    assert "1 = masked" in fig.get_suptitle()
    assert texts(colorbar_axes(fig)[0].get_yticklabels()) == ["allowed (0)", "masked (1)"]

    fig = rendered(plot.plot_masks(look_ahead_mask=look_ahead))
    assert len(main_axes(fig)) == 1
    with pytest.raises(ValueError, match="at least one"):
        plot.plot_masks()


# -------------------------------------------------------------------- learning rate


def test_learning_rate_is_evaluated_on_every_step_and_marks_the_warmup_peak():
    schedule = NumpySchedule(d_model=128, warmup_steps=4000)
    fig = rendered(plot.plot_learning_rate(schedule, num_steps=10000))
    (ax,) = main_axes(fig)
    curve, peak = ax.get_lines()[0], ax.get_lines()[-1]
    steps = curve.get_xdata()
    np.testing.assert_array_equal(steps, np.arange(1, 10001))
    np.testing.assert_allclose(curve.get_ydata(), paper_schedule(128, 4000, steps), rtol=1e-6)
    assert peak.get_xdata()[0] == 4000
    np.testing.assert_allclose(peak.get_ydata()[0], 128**-0.5 * 4000**-0.5, rtol=1e-6)
    assert "warmup_steps=4000" in ax.get_title() and "d_model=128" in ax.get_title()
    assert ax.get_xlabel() == "Train step" and ax.get_ylabel() == "Learning rate"


def test_learning_rate_of_a_scalar_only_schedule_is_sampled():
    fig = rendered(plot.plot_learning_rate(ScalarOnlySchedule(64, 1000), num_steps=20000))
    curve = main_axes(fig)[0].get_lines()[0]
    steps = curve.get_xdata()
    assert 1000 <= len(steps) <= 1001 and steps[0] == 1 and steps[-1] == 20000
    assert 1000 in steps  # the peak itself is sampled
    np.testing.assert_allclose(curve.get_ydata(), paper_schedule(64, 1000, steps), rtol=1e-6)


def test_learning_rate_of_a_keras_schedule():
    schedule = keras.optimizers.schedules.ExponentialDecay(1e-3, decay_steps=100, decay_rate=0.5)
    fig = rendered(plot.plot_learning_rate(schedule, num_steps=300))
    curve = main_axes(fig)[0].get_lines()[0]
    np.testing.assert_allclose(
        curve.get_ydata(), 1e-3 * 0.5 ** (np.arange(1, 301) / 100), rtol=1e-5
    )
    assert len(main_axes(fig)[0].get_lines()) == 1  # no warmup_steps, no peak marker


def test_learning_rate_of_the_project_schedule():
    schedule = training.CustomSchedule(128, warmup_steps=4000)
    fig = rendered(plot.plot_learning_rate(schedule, num_steps=8000))
    curve = main_axes(fig)[0].get_lines()[0]
    np.testing.assert_allclose(
        curve.get_ydata(), paper_schedule(128, 4000, np.arange(1, 8001)), rtol=1e-5
    )
    assert "warmup_steps=4000" in main_axes(fig)[0].get_title()


def test_learning_rate_bad_input():
    with pytest.raises(ValueError, match="`schedule`.*callable"):
        plot.plot_learning_rate(0.001)
    with pytest.raises(ValueError, match="`num_steps`.*num_steps=0"):
        plot.plot_learning_rate(NumpySchedule(), num_steps=0)


# ------------------------------------------------------------------------ attention


def softmax_rows(rng, shape):
    logits = rng.normal(size=shape)
    weights = np.exp(logits)
    return weights / weights.sum(axis=-1, keepdims=True)


def test_attention_head_labels_keys_on_x_and_queries_on_y():
    weights = softmax_rows(np.random.default_rng(1), (len(TGT), len(SRC)))
    in_tokens = [t.encode() for t in SRC]  # bytes, as a tokenizer returns them
    fig = rendered(plot.plot_attention_head(in_tokens, np.array(TGT), weights))
    (ax,) = main_axes(fig)
    assert len(colorbar_axes(fig)) == 1
    np.testing.assert_allclose(image_data(ax), weights)
    assert texts(ax.get_xticklabels()) == SRC
    assert all(label.get_rotation() == 90 for label in ax.get_xticklabels())
    assert texts(ax.get_yticklabels()) == TGT
    assert "keys" in ax.get_xlabel() and "queries" in ax.get_ylabel()


def test_attention_head_into_a_given_axes_returns_its_figure():
    fig = Figure()
    ax_left, ax_right = fig.subplots(1, 2)
    weights = np.full((2, 3), 1 / 3)
    returned = plot.plot_attention_head(["a", "b", "c"], ["x", "y"], weights, ax=ax_right)
    assert returned is fig
    assert len(fig.axes) == 2  # no colour bar added by default into someone else's figure
    assert len(ax_right.images) == 1 and len(ax_left.images) == 0
    rendered(fig)


def test_attention_head_accepts_string_tensors():
    weights = np.full((len(TGT), len(SRC)), 1 / len(SRC))
    fig = plot.plot_attention_head(
        tf.constant(SRC), tf.constant(TGT), tf.constant(weights[None, None])
    )
    (ax,) = main_axes(rendered(fig))
    assert texts(ax.get_xticklabels()) == SRC
    assert texts(ax.get_yticklabels()) == TGT


def test_attention_head_shape_mismatch_names_both_token_lists():
    weights = np.full((len(SRC), len(TGT)), 0.2)  # transposed by mistake
    with pytest.raises(ValueError) as error:
        plot.plot_attention_head(SRC, TGT, weights)
    message = str(error.value)
    assert "(6, 5)" in message and "`out_tokens`" in message and "`in_tokens`" in message
    assert "expected shape (5, 6)" in message


def test_attention_weights_grid_of_heads():
    rng = np.random.default_rng(2)
    attention = softmax_rows(rng, (1, 8, len(TGT), len(SRC)))  # (batch, heads, q, k)
    fig = rendered(plot.plot_attention_weights(SRC, TGT, attention, "decoder_layer4_block2"))
    axes = main_axes(fig)
    assert len(axes) == 8
    assert len(colorbar_axes(fig)) == 1
    assert fig.get_suptitle() == "decoder_layer4_block2 (encoder-decoder attention)"
    assert axes[0].get_subplotspec().get_geometry()[:2] == (2, 4)  # the tutorial's grid
    for head, ax in enumerate(axes):
        assert ax.get_title() == f"Head {head + 1}"
        assert texts(ax.get_xticklabels()) == SRC
        assert texts(ax.get_yticklabels()) == TGT
        np.testing.assert_allclose(image_data(ax), attention[0, head])
    # One colour scale for all heads, so they can be compared.
    limits = {ax.images[0].get_clim() for ax in axes}
    assert limits == {(0.0, attention.max())}


@pytest.mark.parametrize(
    ("num_heads", "grid"), [(1, (1, 1)), (3, (1, 3)), (4, (2, 2)), (5, (2, 3)), (6, (2, 3))]
)
def test_attention_weights_grid_shape(num_heads, grid):
    attention = np.full((num_heads, 3, 4), 0.25)  # (heads, q, k)
    fig = rendered(plot.plot_attention_weights(None, None, attention))
    axes = main_axes(fig)
    assert len(axes) == num_heads  # unused grid cells are removed
    assert axes[0].get_subplotspec().get_geometry()[:2] == grid
    assert fig.get_suptitle() == "attention weights"


def test_attention_weights_from_the_weights_dict_and_layer_names():
    attention = np.full((2, 4, 3, 3), 1 / 3)  # (batch, heads, q, k)
    weights = {"encoder_layer1": attention, "decoder_layer1_block1": attention}
    tokens = ["[START]", "olá", "[END]"]
    fig = rendered(
        plot.plot_attention_weights(tokens, tokens, weights, "decoder_layer1_block1", batch_index=1)
    )
    assert fig.get_suptitle() == "decoder_layer1_block1 (masked decoder self-attention)"
    assert texts(main_axes(fig)[3].get_xticklabels()) == tokens
    with pytest.raises(ValueError, match="`layer_name`.*decoder_layer1_block1.*encoder_layer1"):
        plot.plot_attention_weights(tokens, tokens, weights, "decoder_layer2_block2")
    with pytest.raises(ValueError, match="`batch_index`.*batch_index=2"):
        plot.plot_attention_weights(tokens, tokens, attention, batch_index=2)


@pytest.mark.parametrize(
    ("name", "description"),
    [
        ("encoder_layer1", "encoder_layer1 (encoder self-attention)"),
        ("decoder_layer12_block1", "decoder_layer12_block1 (masked decoder self-attention)"),
        ("decoder_layer4_block2", "decoder_layer4_block2 (encoder-decoder attention)"),
        ("decoder_layer4", "decoder_layer4"),
        ("my_layer", "my_layer"),
        (None, "attention weights"),
    ],
)
def test_attention_layer_description(name, description):
    assert plot.attention_layer_description(name) == description


def test_attention_weights_shape_errors():
    attention = np.full((8, 5, 6), 1 / 6)
    with pytest.raises(ValueError, match="`out_tokens`.*`in_tokens`.*expected shape \\(4, 6\\)"):
        plot.plot_attention_weights(SRC, TGT[:4], attention)
    with pytest.raises(ValueError, match=r"\(num_heads, seq_q, seq_k\).*shape \(5, 6\)"):
        plot.plot_attention_weights(SRC, TGT, attention[0])


# ------------------------------------------------------ overview of all layers and heads

OUT = ["[START]", *TGT]  # as Translation.tokens: row i predicts OUT[i + 1]


def weights_dict(rng, num_layers=2, num_heads=3, batch=None):
    """A weights dict as the Transformer returns it, for SRC -> OUT."""
    lead = () if batch is None else (batch,)
    weights = {}
    for i in range(1, num_layers + 1):
        weights[f"encoder_layer{i}"] = softmax_rows(rng, (*lead, num_heads, len(SRC), len(SRC)))
        weights[f"decoder_layer{i}_block1"] = softmax_rows(
            rng, (*lead, num_heads, len(TGT), len(TGT))
        )
        weights[f"decoder_layer{i}_block2"] = softmax_rows(
            rng, (*lead, num_heads, len(TGT), len(SRC))
        )
    return weights


def test_attention_overview_of_one_kind_is_a_layer_by_head_grid():
    weights = weights_dict(np.random.default_rng(3))
    fig = rendered(plot.plot_attention_overview(SRC, OUT, weights, kind="cross"))
    axes = main_axes(fig)
    assert len(axes) == 2 * 3
    assert len(colorbar_axes(fig)) == 1
    assert axes[0].get_subplotspec().get_geometry()[:2] == (2, 3)  # layers x heads
    assert fig.get_suptitle().startswith("encoder-decoder attention: ")
    for index, ax in enumerate(axes):
        layer, head = divmod(index, 3)
        assert ax.get_title() == f"layer {layer + 1}, head {head + 1}"
        np.testing.assert_allclose(
            image_data(ax), weights[f"decoder_layer{layer + 1}_block2"][head]
        )
        # Queries (the predicted tokens OUT[1:]) on the first column, keys on the last row.
        assert texts(ax.get_yticklabels()) == (TGT if head == 0 else [])
        assert texts(ax.get_xticklabels()) == (SRC if layer == 1 else [])
    # One colour scale for every layer and head of the kind.
    expected = max(weights[f"decoder_layer{i}_block2"].max() for i in (1, 2))
    assert {ax.images[0].get_clim() for ax in axes} == {(0.0, expected)}


def test_attention_overview_of_all_kinds_in_the_order_of_section_3_2_3():
    weights = weights_dict(np.random.default_rng(4), num_layers=1, num_heads=2)
    fig = rendered(plot.plot_attention_overview(SRC, OUT, weights))
    assert len(fig.subfigs) == 3
    titles = [subfig.get_suptitle().split(":")[0] for subfig in fig.subfigs]
    assert titles == [
        "encoder-decoder attention",
        "encoder self-attention",
        "masked decoder self-attention",
    ]
    assert "layer (rows) and head (columns)" in fig.get_suptitle()
    cross, encoder, decoder = (main_axes(subfig) for subfig in fig.subfigs)
    assert [len(axes) for axes in (cross, encoder, decoder)] == [2, 2, 2]
    assert all(len(colorbar_axes(subfig)) == 1 for subfig in fig.subfigs)
    assert texts(encoder[0].get_yticklabels()) == SRC
    assert texts(encoder[0].get_xticklabels()) == SRC
    # The decoder read OUT[:-1] (its keys) and row i predicts OUT[i + 1].
    assert texts(decoder[0].get_xticklabels()) == OUT[:-1]
    assert texts(decoder[0].get_yticklabels()) == TGT
    assert texts(decoder[1].get_yticklabels()) == []
    np.testing.assert_allclose(image_data(decoder[1]), weights["decoder_layer1_block1"][1])


def test_attention_overview_of_batched_weights_and_one_token_per_query():
    weights = weights_dict(np.random.default_rng(5), num_layers=1, num_heads=2, batch=2)
    fig = rendered(
        plot.plot_attention_overview(SRC, TGT, weights, kind="decoder_self", batch_index=1)
    )
    axes = main_axes(fig)
    assert fig.get_suptitle().startswith("masked decoder self-attention: ")
    np.testing.assert_allclose(image_data(axes[1]), weights["decoder_layer1_block1"][1, 1])
    assert texts(axes[0].get_xticklabels()) == TGT  # the same tokens on both axes
    assert texts(axes[0].get_yticklabels()) == TGT
    # Tokens are optional; the encoder needs none of the decoder's.
    encoder_only = {"encoder_layer1": weights["encoder_layer1"][:1]}  # (1, heads, q, k)
    fig = rendered(plot.plot_attention_overview(None, None, encoder_only, kind="encoder"))
    assert fig.get_suptitle().startswith("encoder self-attention: ")
    assert main_axes(fig)[0].get_ylabel() == ""
    assert fig.get_supylabel() == "query position"


def test_attention_overview_bad_input():
    weights = weights_dict(np.random.default_rng(6), num_layers=3, num_heads=2)
    with pytest.raises(ValueError, match="`kind`.*'all', 'cross', 'encoder'.*kind='self'"):
        plot.plot_attention_overview(SRC, OUT, weights, kind="self")
    with pytest.raises(ValueError, match="`attention_weights`.*encoder_layer.*list"):
        plot.plot_attention_overview(SRC, OUT, [weights["encoder_layer1"]])
    gap = {k: v for k, v in weights.items() if k != "decoder_layer2_block2"}
    with pytest.raises(ValueError, match="without `decoder_layer2_block2` \\(encoder-decoder"):
        plot.plot_attention_overview(SRC, OUT, gap, kind="cross")
    with pytest.raises(ValueError, match="without `encoder_layer1`.*kind='encoder'.*keys are"):
        plot.plot_attention_overview(
            SRC, OUT, {"decoder_layer1_block1": weights["encoder_layer1"]}, kind="encoder"
        )
    rank = {**weights, "encoder_layer2": weights["encoder_layer2"][0]}
    with pytest.raises(
        ValueError, match=r"`attention_weights\['encoder_layer2'\]`.*shape \(6, 6\)"
    ):
        plot.plot_attention_overview(SRC, OUT, rank, kind="encoder")
    shape = {**weights, "encoder_layer3": weights["encoder_layer3"][:1]}
    with pytest.raises(ValueError, match=r"shape \(1, 6, 6\).*layer 1 of shape \(2, 6, 6\)"):
        plot.plot_attention_overview(SRC, OUT, shape, kind="encoder")
    with pytest.raises(ValueError, match="Received 5 `in_tokens` for `encoder_layer1` with 6 keys"):
        plot.plot_attention_overview(SRC[:5], OUT, weights, kind="encoder")
    with pytest.raises(ValueError, match="Received 4 `out_tokens`.*expected 5 tokens.*or 6"):
        plot.plot_attention_overview(SRC, OUT[:4], weights, kind="cross")
    with pytest.raises(ValueError, match="`batch_index`.*batch of 1"):
        plot.plot_attention_overview(
            SRC, OUT, {"encoder_layer1": np.zeros((1, 2, 6, 6))}, kind="encoder", batch_index=1
        )


# ------------------------------------------------------------------ training curves

HISTORY = {
    "loss": [5.0, 4.0, 3.2],
    "masked_accuracy": [0.1, 0.2, 0.3],
    "val_loss": [4.6, 3.9, 3.5],
    "val_masked_accuracy": [0.12, 0.21, 0.26],
    "learning_rate": [1e-4, 2e-4, 3e-4],
}


def test_training_curves_from_a_dict():
    fig = rendered(plot.plot_training_curves(HISTORY))
    axes = main_axes(fig)
    assert [ax.get_title() for ax in axes] == ["loss", "accuracy", "learning rate"]
    assert texts(axes[0].get_legend().get_texts()) == ["loss", "val_loss"]
    assert texts(axes[1].get_legend().get_texts()) == ["masked_accuracy", "val_masked_accuracy"]
    np.testing.assert_array_equal(axes[0].get_lines()[0].get_xdata(), [1, 2, 3])
    np.testing.assert_allclose(axes[0].get_lines()[1].get_ydata(), HISTORY["val_loss"])


def test_training_curves_from_a_keras_history_and_without_validation():
    class History:  # what keras.callbacks.History exposes
        history = {"loss": [2.0, 1.0], "masked_accuracy": [0.5, 0.6]}

    axes = main_axes(rendered(plot.plot_training_curves(History())))
    assert [ax.get_title() for ax in axes] == ["loss", "accuracy"]


def test_training_curves_from_a_csv_log(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(
        "epoch,learning_rate,loss,masked_accuracy,val_loss,val_masked_accuracy\n"
        "0,0.0001,5.0,0.1,4.6,0.12\n"
        "1,0.0002,4.0,0.2,3.9,0.21\n"
    )
    axes = main_axes(rendered(plot.plot_training_curves(path)))
    assert len(axes) == 3
    # CSVLogger's epoch 0 is the log's "Epoch 1/N": the x-axis counts from 1.
    np.testing.assert_array_equal(axes[0].get_lines()[0].get_xdata(), [1, 2])
    np.testing.assert_allclose(axes[1].get_lines()[1].get_ydata(), [0.12, 0.21])


def test_training_curves_bad_input(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("epoch,loss\n0,5.0\n1,oops\n")
    with pytest.raises(ValueError, match=r"log\.csv:3: column `loss` holds 'oops'"):
        plot.plot_training_curves(str(path))
    with pytest.raises(ValueError, match="columns of different lengths"):
        plot.plot_training_curves({"loss": [1.0, 2.0], "val_loss": [1.0]})
    with pytest.raises(ValueError, match=r"`history`.*columns \['bleu', 'epoch'\]"):
        plot.plot_training_curves({"epoch": [0], "bleu": [12.0]})
    with pytest.raises(ValueError, match="`history`.*dict of lists"):
        plot.plot_training_curves([1.0, 2.0])


# ------------------------------------------------------- why divide by sqrt(d_k)


def test_dot_product_variance_grows_as_d_k_and_scaling_undoes_it():
    d_ks = (1, 4, 64, 512)
    stats = plot.dot_product_statistics(d_ks, num_samples=1000, num_keys=16, seed=0)
    # Section 3.2.1: q . k has variance d_k; divided by sqrt(d_k) it has variance 1.
    np.testing.assert_allclose(stats["variance_unscaled"], d_ks, rtol=0.1)
    np.testing.assert_allclose(stats["variance_scaled"], 1.0, rtol=0.1)
    # Unscaled, the softmax saturates: the top weight tends to 1, entropy to 0.
    assert np.all(np.diff(stats["max_weight_unscaled"]) > 0)
    assert stats["max_weight_unscaled"][-1] > 0.9
    assert stats["entropy_unscaled"][-1] < 0.25
    assert np.all(stats["max_weight_scaled"] < 0.35)
    assert np.all(stats["entropy_scaled"] > 0.8 * math.log(16))
    # Seeded: the same numbers again.
    again = plot.dot_product_statistics(d_ks, num_samples=1000, num_keys=16, seed=0)
    for key, values in stats.items():
        np.testing.assert_array_equal(values, again[key])


def test_plot_dot_product_variance():
    fig = rendered(plot.plot_dot_product_variance((1, 8, 64), num_samples=200))
    axes = main_axes(fig)
    assert len(axes) == 3
    assert "sqrt(d_k)" in fig.get_suptitle()
    for ax in axes:
        assert ax.get_xlabel() == "d_k"
        np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), [1, 8, 64])
    with pytest.raises(ValueError, match="`d_k`.*d_k=0"):
        plot.dot_product_statistics((0, 4))


# ------------------------------------------------------------------------- general


def test_figures_render_inline_in_jupyter_and_leave_no_pyplot_state():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()  # figures other tests of this process left open
    fig = plot.plot_mask(np.triu(np.ones((3, 3)), k=1))
    assert fig._repr_png_().startswith(b"\x89PNG")  # how IPython displays it
    plot.plot_attention_weights(None, None, np.full((2, 2, 2), 0.5))
    plot.plot_learning_rate(NumpySchedule(), num_steps=10)
    assert plt.get_fignums() == before


def test_plot_package_imports_neither_tensorflow_nor_pyplot():
    modules = sorted(Path(plot.__file__).parent.glob("*.py"))
    assert {path.name for path in modules} >= {"__init__.py", "_figure.py", "attention.py"}
    for path in modules:
        source = path.read_text(encoding="utf-8")
        for forbidden in (
            "import tensorflow",
            "from tensorflow",
            "import keras",
            "import matplotlib.pyplot",
        ):
            assert forbidden not in source, f"{path.name}: {forbidden}"


def test_every_public_function_is_exported_from_the_package():
    for name in plot.__all__:
        function = getattr(plot, name)
        assert callable(function)
        assert function.__module__.startswith("transformer.plot.")


@pytest.mark.parametrize("layer_name, xlabel, ylabel", [
    ("encoder_layer1", "source tokens (keys)", "source tokens (queries)"),
    ("decoder_layer1_block1", "target tokens (keys)", "target tokens (queries)"),
    ("decoder_layer1_block2", "source tokens (keys)", "target tokens (queries)"),
    (None, "keys", "queries"),
])
def test_attention_axes_say_where_queries_and_keys_come_from(layer_name, xlabel, ylabel):
    # Queries are never called "output tokens": in encoder self-attention they are
    # the source tokens.
    weights = np.full((2, 3, 3), 1 / 3)
    tokens = ["[START]", "a", "[END]"]
    axes = main_axes(rendered(plot.plot_attention_weights(tokens, tokens, weights,
                                                          layer_name=layer_name)))
    assert axes[0].get_ylabel() == ylabel and axes[-1].get_xlabel() == xlabel
    head = main_axes(rendered(plot.plot_attention_head(tokens, tokens, weights[0])))[0]
    assert (head.get_xlabel(), head.get_ylabel()) == ("keys", "queries")
