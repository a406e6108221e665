"""Files written by earlier versions of the code still load and translate the same.

`tests/fixtures/run_v1/` is a small run directory (config.json, tokenizers/,
model.keras) written by the code before the decoder cache moved into the
layers, with the translations that code produced (`expected.json`). It was
made by `tests/fixtures/make_run_v1.py`; do not regenerate it, or it stops
testing anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np

from transformer.strategies import Beam
from transformer.translate import Translator

FIXTURE = Path(__file__).parent / "fixtures" / "run_v1"


def test_old_model_file_loads_with_the_registered_names():
    model = keras.saving.load_model(FIXTURE / "model.keras", compile=False)
    assert type(model).__name__ == "Transformer"
    layer = model.decoder.dec_layers[0]
    names = [layer.causal_self_attention.name, layer.cross_attention.name, layer.ffn.name]
    assert names == ["causal_self_attention", "cross_attention", "ffn"]
    assert layer.cross_attention.mha.wq.name == "wq"


def test_old_run_directory_translates_as_before():
    expected = json.loads((FIXTURE / "expected.json").read_text())
    translator = Translator.from_run(FIXTURE)
    sentences = expected["sentences"]
    greedy = translator(sentences)
    for got, want in zip(greedy, expected["greedy"], strict=True):
        assert got.text == want["text"]
        assert got.token_ids.tolist() == want["token_ids"]
        if want["token_ids"]:
            assert np.isclose(got.log_prob, want["log_prob"], rtol=1e-4, atol=1e-4)
    beam = translator(sentences, search=Beam(3))
    for got, want in zip(beam, expected["beam3"], strict=True):
        assert got.token_ids.tolist() == want["token_ids"]
        if want["token_ids"]:
            assert np.isclose(got.score, want["score"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        greedy[0].attention_weights["decoder_layer1_block2"],
        np.array(expected["attention_decoder_layer1_block2_first"]),
        atol=1e-5,
    )
