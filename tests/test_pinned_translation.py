"""How long a translation may grow, pinned on a model that never ends a
sentence (issue 66): every output then has exactly its limit's length, so a
limit that moves shows. The paper's input length + 50 (section 6.1), the
default cap of 128 tokens, the model's own `max_length`, the two passes of a
list (a short first limit, then the sentences it stopped, to their full
limit), and the evaluation's `max_tokens`.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer.constants import (
    DEFAULT_EXTRA_LENGTH,
    DEFAULT_MAX_OUTPUT_LENGTH,
    END_ID,
    TRANSLATE_FIRST_PASS_EXTRA,
)

MODEL_MAX_LENGTH = 140
SHORT = "o gato come o peixe"
LONG = " ".join(["o menino le o livro vermelho de a menina"] * 5)


@pytest.fixture(scope="module")
def endless():
    """Tokenizers and a seeded untrained model whose `[END]` logit is far below the others."""
    import keras

    from transformer import Transformer
    from transformer.data import generate_toy_corpus
    from transformer.data.tokenizers import build_tokenizers

    keras.utils.set_random_seed(5)
    pairs = generate_toy_corpus(seed=0, n_train=300, n_valid=1, n_test=1).train
    tokenizers = build_tokenizers(pairs, vocab_size=100, kind="sentencepiece", shared=True)
    vocab = int(tokenizers.source.get_vocab_size())
    model = Transformer(num_layers=1, d_model=16, num_heads=2, dff=32, input_vocab_size=vocab,
                        target_vocab_size=vocab, max_length=MODEL_MAX_LENGTH, dropout_rate=0.0)
    model.build(((None, None), (None, None)))
    bias = np.array(model.final_layer.bias)
    bias[END_ID] = -1e4
    model.final_layer.bias.assign(bias)
    return tokenizers, model


def _source_tokens(tokenizers, text):
    return int(tokenizers.source.tokenize([text]).row_lengths()[0]) - 2  # without START, END


def _generated(result):
    return len([t for t in result.token_ids if t != END_ID])


def test_outputs_stop_at_input_length_plus_50_and_at_128_tokens(endless):
    from transformer.decoding.translator import Translator

    tokenizers, model = endless
    short, long = _source_tokens(tokenizers, SHORT), _source_tokens(tokenizers, LONG)
    assert short + DEFAULT_EXTRA_LENGTH < DEFAULT_MAX_OUTPUT_LENGTH < long + DEFAULT_EXTRA_LENGTH
    assert long < MODEL_MAX_LENGTH
    translator = Translator(tokenizers, model)
    assert translator.max_length == DEFAULT_MAX_OUTPUT_LENGTH == 128
    # One list: the short sentence stops at the first pass's shorter limit and is
    # searched again to its full one, in a batch of its own with the long one.
    results = translator([SHORT, LONG], return_attention=False)
    lengths = [_generated(result) for result in results]
    assert lengths == [short + DEFAULT_EXTRA_LENGTH, DEFAULT_MAX_OUTPUT_LENGTH]
    assert short + TRANSLATE_FIRST_PASS_EXTRA < lengths[0]
    # Alone, each gives the same: the two passes give what one pass would.
    alone = [_generated(translator(text, return_attention=False)) for text in (SHORT, LONG)]
    assert alone == lengths


def test_a_larger_cap_is_the_models_max_length_and_none_lifts_the_input_rule(endless):
    from transformer.decoding.translator import Translator

    tokenizers, model = endless
    short = _source_tokens(tokenizers, SHORT)
    wide = Translator(tokenizers, model, max_length=1000, extra_length=None)
    assert wide.max_length == MODEL_MAX_LENGTH
    assert _generated(wide(SHORT, return_attention=False)) == MODEL_MAX_LENGTH
    narrow = Translator(tokenizers, model, extra_length=3)
    assert _generated(narrow(SHORT, return_attention=False)) == short + 3
    assert _generated(narrow(SHORT, max_length=6, return_attention=False)) == 6


def test_evaluation_limits_outputs_to_max_tokens(endless):
    from transformer.decoding.translator import Translator
    from transformer.run.evaluation import evaluate

    tokenizers, model = endless
    pairs = [(SHORT, "the cat eats the fish"), (LONG, "the boy reads")]
    evaluation = evaluate(model, tokenizers, pairs, batch_size=8, max_tokens=12)
    translator = Translator(tokenizers, model)
    limited, longer = ([t.text for t in translator([s for s, _ in pairs], max_length=limit,
                                                   return_attention=False)]
                       for limit in (12, 20))
    assert evaluation.translations == limited != longer
