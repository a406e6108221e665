"""Files written by earlier versions of the code still load and translate the same.

`tests/fixtures/run_v1/` is a small run directory (config.json, tokenizers/,
model.keras) written by the code before the decoder cache moved into the
layers, with the translations that code produced (`expected.json`). It was
made by `tests/fixtures/make_run_v1.py`. `tests/fixtures/model_v2/` is a
pre-norm model with tied embeddings and a shallower decoder, saved before the
encoder, the decoder and the model kept their hyperparameters as one
`TransformerConfig`, with its logits (`tests/fixtures/make_model_v2.py`). Do
not regenerate either, or they stop testing anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np

from transformer.decoding.strategies import Beam
from transformer.decoding.translator import Translator
from transformer.model import Decoder, Encoder, TiedOutputProjection
from transformer.model_config import TransformerConfig

FIXTURE = Path(__file__).parent / "fixtures" / "run_v1"
MODEL_V2 = Path(__file__).parent / "fixtures" / "model_v2"


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


def test_a_model_saved_before_the_config_was_passed_down_loads_and_computes_the_same(tmp_path):
    expected = json.loads((MODEL_V2 / "expected.json").read_text())
    model = keras.saving.load_model(MODEL_V2 / "model.keras", compile=False)
    config = TransformerConfig.from_dict(expected["config"])
    assert model.config == config
    assert model.encoder.config is model.decoder.config is model.config
    assert (len(model.encoder.enc_layers), len(model.decoder.dec_layers)) == (2, 1)
    assert isinstance(model.final_layer, TiedOutputProjection)  # still tied
    inputs = (np.array(expected["context"]), np.array(expected["target"]))
    np.testing.assert_allclose(model(inputs).numpy(), np.array(expected["logits"]), atol=1e-5)
    model.save(tmp_path / "again.keras")  # and saves in today's format, which loads alike
    again = keras.saving.load_model(tmp_path / "again.keras", compile=False)
    np.testing.assert_allclose(again(inputs).numpy(), np.array(expected["logits"]), atol=1e-5)


def test_stack_configs_written_one_field_at_a_time_still_load():
    old = {"num_layers": 2, "d_model": 16, "num_heads": 2, "dff": 32, "vocab_size": 40,
           "max_length": 20, "dropout_rate": 0.0, "normalize_first": True, "name": "decoder"}
    decoder = Decoder.from_config(old)
    assert len(decoder.dec_layers) == 2 and decoder.config.decoder_layers == 2
    assert decoder.config.normalize_first and decoder.vocab_size == 40
    encoder = Encoder.from_config({**old, "name": "encoder"})
    assert encoder.config == TransformerConfig(num_layers=2, d_model=16, num_heads=2, dff=32,
                                               max_length=20, dropout_rate=0.0,
                                               normalize_first=True)
    assert Encoder.from_config(encoder.get_config()).get_config() == encoder.get_config()
