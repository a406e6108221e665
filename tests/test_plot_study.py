"""Tests of the study notes' figures (transformer/plot/diagrams.py and study.py):
each returns a Figure that renders, draws the numbers it is given, and refuses
bad input with a clear error."""

import io

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from transformer import positional_encoding  # noqa: E402
from transformer.plot import diagrams, study  # noqa: E402

COLORBAR = "<colorbar>"


def rendered(fig):
    assert isinstance(fig, Figure)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    return fig


def all_text(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + " ".join(
        t.get_text() for t in fig.texts)


def main_axes(fig):
    return [ax for ax in fig.axes if ax.get_label() != COLORBAR]


def test_architecture_prints_the_model_s_sizes():
    fig = rendered(diagrams.plot_transformer_architecture(2, 64, 4, 256, 120, 110))
    text = all_text(fig)
    for expected in ("d_model=64", "h=4", "dff=256", "64→256→64", "(b, m, 110)", "4 heads × 16",
                     "Masked Multi-Head", "encoder-decoder", "2×"):
        assert expected in text, expected


def test_architecture_refuses_heads_that_do_not_divide_d_model():
    with pytest.raises(ValueError, match="num_heads"):
        diagrams.plot_transformer_architecture(2, 64, 5, 256)
    with pytest.raises(ValueError, match="d_model"):
        diagrams.plot_transformer_architecture(2, 0, 4, 256)


def test_scaled_dot_product_diagram_shapes_and_the_optional_mask():
    text = all_text(rendered(diagrams.plot_scaled_dot_product_diagram(6, 7, 16, 8)))
    assert "(6, 7) logits" in text and "(6, 8) output" in text and "÷ √16" in text
    assert "Mask" in text
    assert "Mask" not in all_text(diagrams.plot_scaled_dot_product_diagram(6, 7, 16, masked=False))


def test_multi_head_diagram_shapes():
    text = all_text(rendered(diagrams.plot_multi_head_diagram(64, 4, 6, 7)))
    for expected in ("(1, 4, 6, 16)", "(1, 4, 7, 16)", "weights (1, 4, 6, 7)", "(1, 6, 64)",
                     "depth d_k = d_v = d_model / h = 16"):
        assert expected in text, expected
    with pytest.raises(ValueError, match="num_heads"):
        diagrams.plot_multi_head_diagram(64, 3, 6)


def test_query_walkthrough_draws_the_softmax_and_the_weighted_sum():
    scores = np.array([2.0, 8.0, 4.0])
    values = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    fig = rendered(study.plot_query_walkthrough(["a", "b", "c"], scores, 4, values))
    weights = np.exp(scores / 2) / np.exp(scores / 2).sum()
    bars = [patch.get_width() for patch in main_axes(fig)[2].patches]
    np.testing.assert_allclose(bars, weights)
    output = main_axes(fig)[4].images[0].get_array()[-1]
    np.testing.assert_allclose(output, weights @ values)
    with pytest.raises(ValueError, match="scores"):
        study.plot_query_walkthrough(["a", "b"], scores, 4, values)


def test_attention_costs_two_panels_one_line_per_series():
    fig = rendered(study.plot_attention_costs(
        [8, 64], {"dot": [1e-4, 2e-4], "additive": [1e-3, 5e-3]},
        {"dot, unscaled": [0.5, 0.9], "dot, scaled": [0.4, 0.4]}))
    left, right = main_axes(fig)
    assert len(left.lines) == 2 and len(right.lines) == 2
    np.testing.assert_allclose(left.lines[0].get_ydata(), [0.1, 0.2])  # in milliseconds
    with pytest.raises(ValueError, match="dot"):
        study.plot_attention_costs([8, 64], {"dot": [1.0]}, {})


def test_three_uses_in_the_paper_s_order_with_the_future_hatched():
    source, rows, columns = ["a", "b", "c"], ["x", "y"], ["s", "x"]
    fig = rendered(study.plot_three_uses(source, rows, columns, np.full((3, 3), 1 / 3),
                                         np.array([[1, 0], [0.5, 0.5]]), np.full((2, 3), 1 / 3)))
    axes = main_axes(fig)
    assert [ax.get_title().split("\n")[0] for ax in axes] == [
        "1. encoder-decoder attention", "2. encoder self-attention",
        "3. masked decoder self-attention"]
    assert len(axes[2].patches) == 1  # one cell above the diagonal of a 2 x 2 matrix
    with pytest.raises(ValueError, match="shape"):
        study.plot_three_uses(source, rows, columns, np.ones((2, 2)), np.ones((2, 2)),
                              np.ones((2, 3)))


def test_sinusoids_label_their_wavelengths():
    pe = positional_encoding(50, 16)
    fig = rendered(study.plot_sinusoids(pe, [0, 1, 8], num_positions=40))
    axes = main_axes(fig)
    np.testing.assert_allclose(axes[1].lines[0].get_ydata(), pe[:40, 1])
    text = all_text(fig)
    assert "sin, wavelength 6.3" in text and "wavelength 628.3" in text
    with pytest.raises(ValueError, match="dimensions"):
        study.plot_sinusoids(pe, [16])


def test_position_similarity_curves_coincide_for_the_library_s_encoding():
    fig = rendered(study.plot_position_similarity(positional_encoding(64, 32)))
    curves = [line.get_ydata() for line in main_axes(fig)[1].lines]
    for curve in curves[1:]:
        np.testing.assert_allclose(curve, curves[0], atol=1e-4)


def test_linear_map_and_shuffled_outputs_and_checks():
    rendered(study.plot_linear_map(np.eye(20), "identity"))
    out = np.arange(12.0).reshape(3, 4)
    fig = rendered(study.plot_shuffled_outputs(["a", "b", "c"], out, [2, 0, 1], out[[2, 0, 1]]))
    assert "max |·| = 0.0e+00" in main_axes(fig)[2].get_title()
    with pytest.raises(ValueError, match="order"):
        study.plot_shuffled_outputs(["a", "b", "c"], out, [0, 0, 1], out)
    fig = rendered(study.plot_layer_checks({"ffn": 1e-7, "encoder": 3e-5}))
    colors = [patch.get_facecolor() for patch in main_axes(fig)[0].patches]
    assert colors[0] != colors[1]  # one under the tolerance, one over
    with pytest.raises(ValueError, match="differences"):
        study.plot_layer_checks({})


def test_label_smoothing_floor_is_the_entropy_of_the_target():
    fig = rendered(study.plot_label_smoothing(100, 0.1))
    right = main_axes(fig)[1]
    eps, vocab = 0.1, 100
    p = 1 - eps + eps / vocab
    entropy = -(p * np.log(p) + (vocab - 1) * eps / vocab * np.log(eps / vocab))
    np.testing.assert_allclose(right.lines[1].get_ydata(), [entropy])
    assert right.lines[0].get_ydata()[0] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="label_smoothing"):
        study.plot_label_smoothing(100, 1.0)


def test_matrices_one_panel_per_entry_rows_are_tokens():
    fig = rendered(study.plot_matrices({"in": np.ones((2, 4)), "hidden": np.zeros((2, 8))},
                                       ["a", "b"], "ffn"))
    axes = main_axes(fig)
    assert [ax.get_title() for ax in axes] == ["in", "hidden"]
    assert axes[1].get_xlabel() == "feature (8)"
    with pytest.raises(ValueError, match="rows"):
        study.plot_matrices({"in": np.ones((3, 4))}, ["a", "b"], "ffn")
