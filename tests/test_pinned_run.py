"""What a real-text run delivers, pinned where a one-line slip would give a
worse translator with no error (issue 66): the precision it trains in, the
`--max-tokens` its batches and evaluation see, the best weights (the moving
average that validation scored), subword sampling in a budgeted run, the
best record a resumed run reads, and a resumed `--init-from` run that keeps
its checkpoint.

One small run (`pinned_run`) with the real-text recipe serves all but the
last, which uses the session's `real_text_run`.
"""

from __future__ import annotations

import hashlib
import json
import types
from pathlib import Path

import keras
import numpy as np
import pytest
from conftest import write_toy_tsv

MAX_TOKENS = 8
PASSES = 4  # the sampling threshold of this run (SAMPLING_MIN_PASSES, patched)


@pytest.fixture(scope="module")
def pinned_run(tmp_path_factory):
    """Four passes of two or three batches of the real-text recipe: a time
    budget that leaves it on course for all four (so it samples subwords from
    pass 2), trimmed to `MAX_TOKENS`, a moving average, and the precision this
    CPU's default would be on a CPU with AMX (mixed_bfloat16)."""
    from transformer.run import RunConfig, recipes, train
    from transformer.run.recipes import default_model

    train_tsv, valid_tsv, test_tsv = write_toy_tsv(tmp_path_factory.mktemp("pinned_data"),
                                                   seed=11, n_train=64, n_valid=8, n_test=8)
    config = RunConfig(
        output_dir=str(tmp_path_factory.mktemp("pinned_run") / "run"),
        data=str(train_tsv), valid=str(valid_tsv), test=str(test_tsv),
        model=default_model("tutorial", data=str(train_tsv), num_layers=1, d_model=32,
                            num_heads=2, dff=64, max_length=24),
        seed=2, epochs=PASSES, batch_tokens=256, vocab_size=90, max_tokens=MAX_TOKENS,
        time_budget=3600.0, checkpoint_every=100, eval_beam_size=1,
    )
    from transformer.run.callbacks import TrainingClock

    ended, epochs_done = [], TrainingClock.epochs_done

    def said_epochs_done(clock, epochs):
        ended.append((epochs, clock.exhausted))
        epochs_done(clock, epochs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipes, "default_precision", lambda: "mixed_bfloat16")
        patch.setattr(recipes, "SAMPLING_MIN_PASSES", PASSES)
        patch.setattr(TrainingClock, "epochs_done", said_epochs_done)
        result = train(config, verbose=0, export=False)
    result.ended_by_epochs = ended
    return result


def test_a_run_its_epochs_end_before_its_budget_says_so(pinned_run):
    # The log's line that the rest of the budget is not used (tests/test_run_callbacks.py).
    assert pinned_run.ended_by_epochs == [(PASSES, False)]


def _record(run_dir, name):
    return json.loads((Path(run_dir) / name).read_text())


def test_the_run_trains_in_the_precision_it_records(pinned_run):
    assert pinned_run.config.precision == "mixed_bfloat16"
    assert _record(pinned_run.run_dir, "config.json")["precision"] == "mixed_bfloat16"
    model = keras.saving.load_model(Path(pinned_run.run_dir) / "model.keras", compile=False)
    policies = {layer.dtype_policy.name for layer in model._flatten_layers()}
    assert policies == {"mixed_bfloat16"}
    assert all(w.dtype == "float32" for w in model.weights)  # variables stay float32
    assert keras.mixed_precision.global_policy().name == "float32"  # restored after the run


def _tokens(tokenizer, texts):
    return [len(row) for row in tokenizer.tokenize(texts).to_list()]


def test_max_tokens_trims_the_training_pairs_and_limits_the_evaluation(pinned_run):
    from transformer.data import read_tsv
    from transformer.data.tokenizers import load_tokenizers
    from transformer.decoding.translator import Translator

    run_dir = Path(pinned_run.run_dir)
    manifest = _record(run_dir, "tokens/tokens.json")
    assert manifest["key"]["max_tokens"] == MAX_TOKENS == manifest["max_tokens"]
    assert manifest["num_trimmed"] > 0
    tokenizers = load_tokenizers(run_dir / "tokenizers")
    sources = [source for source, _ in read_tsv(pinned_run.config.test)]
    assert max(_tokens(tokenizers.source, sources)) > MAX_TOKENS  # there is something to trim
    # The test split was translated with outputs of at most MAX_TOKENS tokens,
    # though the model's max_length is 24; this barely trained model reaches either.
    model = keras.saving.load_model(run_dir / "model.keras", compile=False)
    translator = Translator(tokenizers, model)
    translations = {limit: [t.text for t in translator(sources, max_length=limit,
                                                       return_attention=False)]
                    for limit in (MAX_TOKENS, 24)}
    assert pinned_run.evaluation.translations == translations[MAX_TOKENS]
    assert translations[24] != translations[MAX_TOKENS]


def _validation_loss(model, tokenizers, pairs):
    import tensorflow as tf

    from transformer.data.batching import batches_from_tokens, tokenize_pairs
    from transformer.training import masked_loss

    tokens = tokenize_pairs(pairs, tokenizers, MAX_TOKENS)
    (context, x), labels = next(iter(batches_from_tokens(tokens, 32, shuffle=False)))
    logits = model((context, x), training=False)
    return float(masked_loss(labels, tf.cast(logits, tf.float32)))


def test_the_best_weights_are_the_moving_average_that_validation_scored(pinned_run):
    from transformer.data import read_tsv
    from transformer.data.tokenizers import load_tokenizers

    run_dir = Path(pinned_run.run_dir)
    best = _record(run_dir, "best.json")
    assert best["moving_average"] is True
    assert best["epoch"] >= 1 and best["step"] == pinned_run.config.steps_per_epoch * best[
        "epoch"]
    history = pinned_run.history["val_loss"]
    assert best["val_loss"] == pytest.approx(min(history), rel=1e-6)
    tokenizers = load_tokenizers(run_dir / "tokenizers")
    valid = read_tsv(pinned_run.config.valid)
    model = keras.saving.load_model(run_dir / "model.keras", compile=False)  # mixed_bfloat16
    final = [np.array(w) for w in model.get_weights()]
    model.load_weights(run_dir / "best.weights.h5")
    # The loss of the weights kept as best is the loss validation reported for them.
    assert _validation_loss(model, tokenizers, valid) == pytest.approx(best["val_loss"], rel=2e-3)
    if best["epoch"] == pinned_run.config.epochs:  # the average at the end: the model
        for kept, delivered in zip(model.get_weights(), final, strict=True):
            np.testing.assert_array_equal(kept, delivered)


def test_a_budgeted_run_on_course_for_enough_passes_samples_subwords(pinned_run):
    from transformer.run import recipes

    run_dir = Path(pinned_run.run_dir)
    plan = _record(run_dir, "sampling.json")
    assert plan["samples"] is True and plan["from_pass"] == 1
    assert plan["expected_passes"] == pytest.approx(PASSES)  # the epochs, under the budget
    assert plan["decided_at_step"] == pinned_run.config.steps_per_epoch
    drawn = [path for path in (run_dir / "tokens").iterdir() if "sampl" in path.name
             or "drawn" in path.name or "variant" in path.name]
    assert drawn, sorted(p.name for p in (run_dir / "tokens").iterdir())
    assert recipes.SAMPLED_SEGMENTATIONS == 8


# ---------------------------------------------------------------------------
# Resuming (these tests change the run: they come last)


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_a_resumed_run_compares_its_epochs_with_its_best_record(pinned_run):
    """The callbacks of a resumed run's `fit` read the best record the run
    kept: when the record says an earlier epoch was better, a worse epoch
    overwrites nothing (otherwise `best.weights.h5` would be the last epoch's)."""
    import tensorflow as tf

    from transformer.run import fitting, trainer
    from transformer.run.callbacks import KeepBest, TrainingClock

    run_dir = Path(pinned_run.run_dir)
    # The record: epoch 4 scored better than any epoch here.
    best = {**_record(run_dir, "best.json"), "val_loss": 0.5, "epoch": PASSES}
    (run_dir / "best.json").write_text(json.dumps(best))
    kept = _sha256(run_dir / "best.weights.h5")
    config = pinned_run.config.replace(patience=3)
    steps = config.epochs * config.steps_per_epoch
    session = types.SimpleNamespace(run_dir=run_dir, write_dir=run_dir, chief=False,
                                    started=0.0)
    data = types.SimpleNamespace(train_tokens=fitting._opened(
        run_dir / "tokens", _record(run_dir, "tokens/tokens.json")))
    state = types.SimpleNamespace(clock=TrainingClock(tf.Variable(0.0, dtype=tf.float64)),
                                  initial_step=steps, checkpoint_manager=None)
    keep = [c for c in trainer._callbacks(session, config, data, state)
            if isinstance(c, KeepBest)]
    assert len(keep) == 1 and keep[0].best == best and keep[0].patience == 3
    keep[0].set_model(keras.saving.load_model(run_dir / "model.keras", compile=False))
    for epoch in range(config.epochs, config.epochs + 3):  # three worse epochs
        keep[0].on_epoch_end(epoch, {"val_loss": 1.0})
    assert _sha256(run_dir / "best.weights.h5") == kept
    assert _record(run_dir, "best.json") == best
    assert keep[0].model.stop_training  # the patience counts from the recorded epoch


def test_an_adapted_run_resumes_from_its_checkpoint_not_its_parents_weights(real_text_run,
                                                                          tmp_path):
    """The trainer's model stage for a resumed `--init-from` run restores the
    checkpoint and does not load the parent's weights over it. The parent here
    is the run itself: its `model.keras` (the moving average) differs from its
    checkpoint (the weights the optimizer ended with)."""
    import tensorflow as tf

    from transformer.run import trainer
    from transformer.run.checkpoints import resume_checkpoint

    run_dir = Path(real_text_run.run_dir)
    data = types.SimpleNamespace(input_vocab_size=None, target_vocab_size=None)
    record = _record(run_dir, "config.json")
    data.input_vocab_size = record["input_vocab_size"]
    data.target_vocab_size = record["target_vocab_size"]

    def built(config, directory):
        session = trainer._Session(strategy=tf.distribute.get_strategy(), chief=True,
                                   saved_fingerprint=None, run_dir=directory,
                                   write_dir=directory, started=0.0, resuming=True,
                                   resume_from=resume_checkpoint(run_dir))
        return [np.array(w) for w in trainer._build_model(session, config, data)
                .model.get_weights()]

    adapted = built(real_text_run.config.replace(init_from=str(run_dir)), tmp_path / "a")
    resumed = built(real_text_run.config, tmp_path / "b")
    for a, b in zip(adapted, resumed, strict=True):
        np.testing.assert_array_equal(a, b)
    delivered = keras.saving.load_model(run_dir / "model.keras", compile=False).get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(adapted, delivered, strict=True))
