"""The training run as a library call: `train(config)`, what `train.py` runs, in named stages.

prepare (strategy, run directory, resume checks) -> data (corpus, tokenizers)
-> resolve (the run's one config, `config.json`) -> model (build, compile,
restore) -> fit -> evaluate (`metrics.json`) -> export. The run directory is
`transformer.rundir`, the config's format `transformer.run.config`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from transformer import rundir
from transformer.data.batching import (
    TokenizedPairs,
    batches_from_tokens,
    batches_per_pass,
    tokenize_pairs,
)
from transformer.data.corpus import Corpus
from transformer.data.loading import data_fingerprint, read_training_corpus
from transformer.data.source import CorpusSource
from transformer.data.tokenizers import build_tokenizers, load_tokenizers, save_tokenizers
from transformer.decoding.translator import export_translator
from transformer.model import build_model
from transformer.run.allocator import use_fast_allocators
from transformer.run.calibration import measure_step
from transformer.run.callbacks import (
    CheckpointSaver,
    EpochSummary,
    KeepBest,
    LearningRateLogger,
    ProgressLog,
    StopOnNaN,
    TrainingClock,
    TrainingError,
    ValidateMovingAverage,
    format_seconds,
    optimizer_step,
    read_best,
    restore_best,
    target_tokens_per_step,
)
from transformer.run.checkpoints import (
    average_weights,
    load_parent_weights,
    open_checkpoints,
    resume_checkpoint,
)
from transformer.run.config import (
    RunConfig,
    check_resumable,
    read_config,
    resumed_with,
    write_config,
)
from transformer.run.distribute import (
    check_same_data,
    chief_clock,
    is_chief,
    link_chief_data,
    make_strategy,
    wait_for_each_other,
    worker_name,
)
from transformer.run.evaluation import Evaluation, evaluate
from transformer.run.fitting import (
    Fitter,
    drawn_pairs,
    fit_calls,
    may_sample,
    plan_needed,
    record_legacy_sampling,
    record_sampling_plan,
    sampling_plan,
    sharding_options,
    tokenizers_digest,
    training_tokens,
)
from transformer.run.recipes import CorpusFacts, resolve, vocab_size_is_default
from transformer.rundir import FINGERPRINT_KEY, check_data_unchanged
from transformer.seams import learning_rate_schedule, require_tensorflow
from transformer.training import MaskedLoss, make_optimizer, masked_accuracy

__all__ = ["TrainResult", "TrainingError", "train", "weights_fingerprint"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainResult:
    """What `train` did.

    Attributes:
        run_dir: the run directory (written by the chief only).
        config: the run's configuration, resolved (`transformer.run.recipes.resolve`).
        history: per-epoch logs of this process' `fit` calls (loss,
            masked_accuracy, val_*, learning_rate).
        evaluation: the test-split `Evaluation` (None on non-chief workers or
            without test pairs).
        examples: `(source, reference, translation)` for the first test pairs.
        initial_step: the step training started (or resumed) from.
        final_step: the optimizer's step at the end.
        is_chief: whether this process wrote the run directory.
        weights_sha256: a fingerprint of the final weights (equal on every
            worker of a multi-worker run).
        export_dir: the exported translator, if it was written.
    """

    run_dir: Path
    config: RunConfig
    history: dict[str, list[float]]
    evaluation: Evaluation | None
    examples: list[tuple[str, str, str]]
    initial_step: int
    final_step: int
    is_chief: bool
    weights_sha256: str
    export_dir: Path | None = None


def weights_fingerprint(model) -> str:
    """SHA-256 of all of a model's weights, in order (equal weights, equal digest)."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(weight)).tobytes())
    return digest.hexdigest()


def train(config: RunConfig, resume: bool = False, verbose="auto", export=True) -> TrainResult:
    """Trains a translator as `train.py` does: data, tokenizers, model, fit,
    checkpoints, evaluation and the run directory.

    1. Creates the distribution strategy (first, as `tf.distribute` requires).
    2. Loads the corpus and builds the tokenizers (or reloads them to resume).
    3. Writes `tokenizers/` and `config.json`, then trains with `model.fit`:
       Adam and `CustomSchedule` (section 5.3), `MaskedLoss` with label
       smoothing (section 5.4), `masked_accuracy`, checkpoints every
       `checkpoint_every` updates and every epoch, `metrics.csv` and
       TensorBoard `logs/`.
    4. Averages the weights if asked (`average_checkpoints`, `ema_momentum`),
       or with `restore_best_weights` takes those of the lowest validation
       loss (`transformer.run.callbacks.restore_best`), saves `model.keras`, evaluates on the test split (`metrics.json`) and
       exports the translator (`export/`) when `transformer.decoding.translator` can.

    Resuming (`resume=True`) restores the weights, the optimizer state (its
    step, hence the learning rate, and any moving average) and the dropout
    seeds from the latest checkpoint, and continues at the batch where it was
    taken: the training pairs are a fixed, seeded stream, so the run sees the
    uninterrupted run's batches and dropout masks, and ends with its weights.
    A resume without a usable checkpoint, on other data or with another
    model's checkpoint is refused (docs/design.md, "Resuming a run").
    With `init_from`, a new run starts from that run's weights and
    vocabulary (`transformer.run.adapt`).

    Args:
        config: the run's `RunConfig`. To resume, the saved one with the
            changes allowed by `transformer.run.config.for_resume` (other
            changes raise); the fields it leaves None keep their saved values.
        resume: continue the run in `config.run_dir`. Without it, a non-empty
            `run_dir` is refused.
        verbose: Keras' progress display: `"auto"` (a progress bar on a
            terminal, else only the one-line epoch summaries), 0, 1 or 2.
        export: also export the translator to `export/`
            (`transformer.decoding.translator.export_translator`).

    Returns:
        A `TrainResult`.

    Raises:
        transformer.rundir.RunDirError: the output directory is not usable, or
            the run cannot be resumed (`CheckpointError` among them).
        transformer.data.DataError: the data cannot be read.
        TrainingError: the loss became NaN (the message names the step).
        ValueError: an invalid setting.

    Example:

    ```python
    result = train(RunConfig(output_dir="runs/toy"))
    result.evaluation.exact_match, result.evaluation.bleu
    ```
    """
    require_tensorflow("train.py (transformer.run.train)")
    started = time.perf_counter()
    session, choices = _prepare(config, resume, started)
    previous_policy = keras.mixed_precision.global_policy()
    try:
        keras.utils.set_random_seed(choices.seed)
        data = _load_data(session, choices)
        # The one config of the run: every later stage sees it, nothing changes it.
        config = _resolve(choices, data)
        keras.mixed_precision.set_global_policy(config.precision)
        if session.chief:  # once the data are ready: a run with config.json can resume
            write_config(session.run_dir, config, data.input_vocab_size,
                         data.target_vocab_size, data.fingerprint)
        state = _build_model(session, config, data)
        history, final_step = _fit(session, config, data, state, verbose)
        average_weights(state.checkpoint, state.checkpoint_manager,
                        config.average_checkpoints, config.ema_momentum)
        if config.restore_best_weights:
            restore_best(state.model, session.write_dir)
        fingerprint = _save_model(session.write_dir, state.model, final_step)
        evaluation, examples, export_dir = None, [], None
        if session.chief:
            evaluation, examples = _evaluate(config, data, state.model)
            _write_metrics(session.run_dir, session.started, config.epochs, evaluation,
                           final_step, fingerprint, float(state.clock.seconds.numpy()))
            if export:
                export_dir = _export(session.run_dir)
        return TrainResult(
            run_dir=session.run_dir,
            config=config,
            history=history,
            evaluation=evaluation,
            examples=examples,
            initial_step=state.initial_step,
            final_step=final_step,
            is_chief=session.chief,
            weights_sha256=fingerprint,
            export_dir=export_dir,
        )
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
        if not session.chief:
            shutil.rmtree(session.write_dir, ignore_errors=True)


# --------------------------------------------------------------------------
# What the stages hand on
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Session:
    """The run being trained: its strategy and where it writes.

    Attributes:
        strategy: the `tf.distribute.Strategy`.
        chief: whether this process writes the run directory.
        resuming: whether a saved run is continued.
        saved_fingerprint: the fingerprint of the data the saved run was
            trained on (`transformer.data.loading.data_fingerprint`); None for a new run, or
            one saved before fingerprints were kept.
        run_dir: the run directory.
        write_dir: where this process writes: `run_dir` on the chief, a
            temporary directory on the other workers.
        started: `time.perf_counter()` when `train` was called.
        resume_from: the checkpoint to restore (None for a new run, or a run
            that stopped before its first checkpoint).
    """

    strategy: tf.distribute.Strategy
    chief: bool
    saved_fingerprint: dict | None
    run_dir: Path
    write_dir: Path
    started: float
    resuming: bool = False
    resume_from: str | None = None


@dataclasses.dataclass
class _Data:
    """The corpus (and its `data_fingerprint`), the tokenizers and the batches of a run."""

    corpus: Corpus
    fingerprint: dict
    tokenizers: Any
    train_tokens: TokenizedPairs
    valid_batches: tf.data.Dataset | None
    input_vocab_size: int
    target_vocab_size: int


@dataclasses.dataclass
class _ModelState:
    """The compiled model, its checkpoints, the step it starts from and the
    clock of its training time (`clock.seconds`, a variable of the checkpoint,
    holds the seconds already trained)."""

    model: keras.Model
    checkpoint: tf.train.Checkpoint
    checkpoint_manager: tf.train.CheckpointManager
    initial_step: int
    clock: TrainingClock


# --------------------------------------------------------------------------
# The stages of `train`, in order
# --------------------------------------------------------------------------


def _prepare(config: RunConfig, resume: bool, started: float) -> tuple[_Session, RunConfig]:
    """Creates the strategy (first, as `tf.distribute` requires) and checks the run
    directory; returns the session and the config: `config`, or to resume, the
    saved one with the changes `config` makes (`resumed_with`)."""
    use_fast_allocators()
    strategy = make_strategy(config.strategy, config.cpu_devices)
    chief, worker = is_chief(strategy), worker_name(strategy)
    resuming = rundir.prepare_run_dir(config.run_dir, resume, chief)  # or a one-line refusal
    resume_from = saved_fingerprint = None
    if resuming:
        saved, record = read_config(config.run_dir)
        check_resumable(config.run_dir, record)  # or a one-line refusal
        config = resumed_with(saved, config)  # or a one-line refusal
        saved_fingerprint = record.get(FINGERPRINT_KEY)
        if chief:
            record_legacy_sampling(config.run_dir, record)
        resume_from = resume_checkpoint(config.run_dir)  # or a one-line refusal
    run_dir = config.run_dir
    write_dir = run_dir if chief else Path(tempfile.mkdtemp(prefix="transformer-worker-"))
    if not chief:
        logger.info("%s writes its copies to %s (deleted at the end).",
                    worker.capitalize(), write_dir)
    session = _Session(strategy=strategy, chief=chief, saved_fingerprint=saved_fingerprint,
                       run_dir=run_dir, write_dir=write_dir, started=started,
                       resuming=resuming, resume_from=resume_from)
    return session, config


def _load_data(session: _Session, config: RunConfig) -> _Data:
    """Loads the corpus, builds (or reloads) the tokenizers and tokenizes the
    pairs, as the (not yet resolved) `config` says.

    A TSV corpus is streamed: one pass scans it (splits, sample, fingerprint)
    and one tokenizes its training pairs into `tokens/`, both recorded there,
    so that a resumed run opens them instead (`transformer.data.streamed`,
    `transformer.run.fitting.training_tokens`). In a multi-worker run the chief does this
    first; the other workers then link its files and open them where they
    share its file system, and all check that they hold the same data.
    """
    if session.chief:
        try:
            data = _make_data(session, config)
        except BaseException:
            wait_for_each_other(session.strategy, failed=True)  # the others stop too
            raise
        wait_for_each_other(session.strategy)  # the other workers may read them now
    else:
        if wait_for_each_other(session.strategy):  # until the chief's data are ready
            raise TrainingError("The chief stopped while preparing the data; its log says why.")
        from_chief = link_chief_data(session.run_dir, session.write_dir, [rundir.TOKENS_DIR])
        data = _make_data(session, config, from_chief)
    check_same_data(session.strategy, hashlib.sha256(json.dumps(
        [data.fingerprint, tokenizers_digest(data.tokenizers), len(data.train_tokens),
         int(data.train_tokens.target.lengths.sum())], sort_keys=True,
        default=str).encode()).hexdigest())
    return data


def _make_data(session: _Session, config: RunConfig, from_chief=False) -> _Data:
    """`_load_data`'s work in this process (`from_chief`: with the chief's
    `tokens/` linked into `session.write_dir` and its tokenizers)."""
    tokens_dir = session.write_dir / rundir.TOKENS_DIR
    source = CorpusSource.of_config(config)  # the part of the config that names the data
    corpus = read_training_corpus(source, record_dir=tokens_dir)
    logger.info("Corpus %s: %d training, %d validation, %d test pairs.", corpus.name,
                len(corpus.train), len(corpus.valid), len(corpus.test))
    fingerprint = data_fingerprint(source, corpus)
    if session.resuming:
        check_data_unchanged(session.run_dir, session.saved_fingerprint,
                             fingerprint)  # or a one-line refusal
    session.write_dir.mkdir(parents=True, exist_ok=True)  # only once the data is readable
    tokenizers = _tokenizers(session, config, corpus, from_chief)
    max_tokens = config.resolved_max_tokens
    train_tokens = training_tokens(tokens_dir, corpus.train, tokenizers, max_tokens, fingerprint)
    valid_batches = None
    if corpus.valid:
        valid_tokens = tokenize_pairs(corpus.valid, tokenizers, max_tokens)
        valid_batches = batches_from_tokens(
            valid_tokens, config.batch_size, shuffle=False).with_options(sharding_options())
    return _Data(
        corpus=corpus,
        fingerprint=fingerprint,
        tokenizers=tokenizers,
        train_tokens=train_tokens,
        valid_batches=valid_batches,
        input_vocab_size=int(tokenizers.source.get_vocab_size()),
        target_vocab_size=int(tokenizers.target.get_vocab_size()),
    )


def _resolve(choices: RunConfig, data: _Data) -> RunConfig:
    """The run's complete config (`resolve`) from `choices` and the training pairs;
    with preset "auto", the model the size rule chose for this machine."""
    train_tokens = data.train_tokens
    lengths = train_tokens.lengths
    mean_tokens = float(lengths.mean())
    vocab_size = data.target_vocab_size
    config = resolve(choices, CorpusFacts(
        len(lengths), mean_tokens,
        lambda tokens, size: batches_per_pass(train_tokens, tokens, batch_size=size,
                                              seed=choices.seed),
        vocab_size=vocab_size,
        measure_step=lambda config, preset: measure_step(config, preset, vocab_size,
                                                         mean_tokens)))
    if config.size_rule:
        logger.info("Model size: %s.", config.size_rule["reason"])
    logger.info("%d epochs of %d steps%s.", config.epochs, config.steps_per_epoch,
                f", batches of at most {config.batch_tokens} tokens" if config.batch_tokens
                else f" of {config.batch_size} pairs")
    return config


def _build_model(session: _Session, config: RunConfig, data: _Data) -> _ModelState:
    """Builds and compiles the model under the strategy; restores the checkpoint to resume."""
    run_dir = session.run_dir
    with session.strategy.scope():
        keras.utils.set_random_seed(config.seed)
        model = build_model(config.model, data.input_vocab_size, data.target_vocab_size)
        # A decay to zero ends at the run's end, and `fit_warmup` fits the warm-up into it.
        ends = config.decay != "inverse_sqrt" or config.fit_warmup
        optimizer = make_optimizer(
            config.model.d_model, config.warmup_steps, config.peak_learning_rate,
            config.epochs * config.steps_per_epoch if ends else None, config.ema_momentum,
            config.decay,
        )
        schedule = learning_rate_schedule(optimizer)
        logger.info("Learning rate: %s.", schedule.describe())
        if config.time_budget is not None and ends:
            # The budget may end the warm-up and the decay too: TrainingClock tells it.
            schedule.set_time_progress(0.0)
        model.compile(
            optimizer=optimizer,
            # Token-budget batches have a new shape every few steps, and the XLA
            # loss compiles for each (BENCHMARKS.md, "Training speed").
            loss=MaskedLoss(config.label_smoothing, jit_compile=not config.batch_tokens),
            metrics=[masked_accuracy],
            jit_compile=config.jit_compile,
        )
        model.optimizer.build(model.trainable_variables)
    checkpoint, manager, train_seconds = open_checkpoints(
        model, session.write_dir / rundir.CHECKPOINTS_DIR, config.average_checkpoints,
        resume_from=session.resume_from,
    )
    if config.init_from and session.resume_from is None:
        load_parent_weights(model, config.init_from)
        logger.info("Weights: those %s delivered; the optimizer and schedule start anew.",
                    config.init_from)
    initial_step = optimizer_step(model.optimizer)
    logger.info(
        "Model: %s, %s parameters, %s precision; %d steps per epoch of %s.",
        ", ".join(f"{k}={v}" for k, v in config.model.to_dict().items()),
        f"{model.count_params():,}",
        config.precision,
        config.steps_per_epoch,
        f"at most {config.batch_tokens} tokens" if config.batch_tokens
        else f"{config.batch_size} pairs",
    )
    if session.resuming and initial_step < config.epochs * config.steps_per_epoch:
        epoch, batch = divmod(initial_step, config.steps_per_epoch)
        logger.info("Resuming %s at step %d (epoch %d, batch %d).", run_dir, initial_step,
                    epoch + 1, batch)
    clock = TrainingClock(train_seconds, config.time_budget, schedule if ends else None,
                          agree=chief_clock(session.strategy) if config.time_budget else None)
    return _ModelState(model=model, checkpoint=checkpoint, checkpoint_manager=manager,
                       initial_step=initial_step, clock=clock)


def _fit(session: _Session, config: RunConfig, data: _Data, state: _ModelState,
         verbose) -> tuple[dict, int]:
    """Trains from the initial step to the last epoch; returns the history and the final step.

    A run interrupted mid-epoch first finishes that epoch, then trains the
    remaining ones, so every epoch ends at a multiple of `steps_per_epoch`.
    """
    steps_per_epoch, total_steps = config.steps_per_epoch, config.epochs * config.steps_per_epoch
    clock = state.clock
    fitter = Fitter(session.strategy, session.chief, config.batch_tokens, config.batch_size,
                    config.seed, data.valid_batches, state.model,
                    _callbacks(session, config, data, state), verbose)
    train_started = time.perf_counter()
    step = state.initial_step
    if step >= total_steps:
        logger.info("%s has already trained all %d epochs (%d steps); evaluating it.",
                    session.run_dir, config.epochs, total_steps)
    elif clock.exhausted:
        logger.info("%s has already used its time budget of %s (%d steps); evaluating it.",
                    session.run_dir, format_seconds(config.time_budget), step)
    else:
        pairs = data.train_tokens
        for first_epoch, last_epoch, steps, start_step in fit_calls(
                step, steps_per_epoch, config.epochs, may_sample(config, pairs)):
            if clock.exhausted:
                break
            pairs = _training_pairs(session, config, data, pairs, start_step,
                                    float(clock.seconds.numpy()))
            fitter.fit(pairs, first_epoch, last_epoch, steps, start_step)
    final_step = optimizer_step(state.model.optimizer)
    if final_step >= total_steps > state.initial_step:
        clock.epochs_done(config.epochs)
    if final_step > state.initial_step:
        logger.info("Trained %d steps in %.0f s.", final_step - state.initial_step,
                    time.perf_counter() - train_started)
    return fitter.history, final_step


def _save_model(write_dir: Path, model, final_step: int) -> str:
    """Logs the weights' fingerprint and saves `model.keras`; returns the fingerprint."""
    fingerprint = weights_fingerprint(model)
    logger.info("Weights after step %d: sha256 %s", final_step, fingerprint)
    rundir.save_model_atomic(model, write_dir / rundir.MODEL_FILE)
    return fingerprint


def _evaluate(config: RunConfig, data: _Data, model) -> tuple[Evaluation | None, list]:
    """Evaluates on the test split; returns the `Evaluation` and the first examples."""
    test = data.corpus.test
    if not test:
        logger.warning("The corpus has no test pairs: skipping the evaluation.")
        return None, []
    eval_started = time.perf_counter()
    evaluation = evaluate(
        model,
        data.tokenizers,
        test,
        batch_size=config.eval_batch_size,
        max_tokens=config.resolved_max_tokens,
        lower_case=config.lower_case,
        beam_size=config.eval_beam_size,
    )
    logger.info("Evaluated %d test pairs in %.0f s.", len(test), time.perf_counter() - eval_started)
    examples = [
        (source, reference, translation)
        for (source, reference), translation in zip(
            test[: config.num_examples],
            evaluation.translations[: config.num_examples],
            strict=True,
        )
    ]
    return evaluation, examples


def _write_metrics(run_dir: Path, started: float, epochs: int, evaluation, final_step: int,
                   fingerprint: str, train_seconds: float) -> None:
    """Writes `metrics.json`: the test evaluation and facts about the run."""
    metrics = {
        "test": evaluation.to_dict() if evaluation else None,
        "final_step": final_step,
        "epochs": epochs,
        # Training and validation over every session of the run (resumes included).
        "train_seconds": round(train_seconds, 1),
        "weights_sha256": fingerprint,
        # This session's time (metrics.csv has every epoch's logs).
        "seconds": round(time.perf_counter() - started, 1),
    }
    rundir.write_json_atomic(run_dir / rundir.METRICS_JSON, metrics)


def _export(run_dir: Path) -> Path | None:
    """Exports the translator to `export/`; a failure is logged, as the run is complete."""
    try:
        return Path(export_translator(run_dir))
    except Exception as err:  # noqa: BLE001 - the run is complete without it
        logger.warning("Could not export the translator: %s", err)
        return None


# --------------------------------------------------------------------------
# Helpers of the stages
# --------------------------------------------------------------------------


def _tokenizers(session: _Session, config: RunConfig, corpus: Corpus, from_chief=False):
    """The saved tokenizers when resuming (or `from_chief`, the chief's of this
    run), else new ones (saved by the chief)."""
    tokenizers_dir = session.run_dir / rundir.TOKENIZERS_DIR
    if (session.resuming or from_chief) and tokenizers_dir.is_dir():
        return load_tokenizers(tokenizers_dir)
    if config.init_from:  # the parent's vocabulary, copied into this run
        parent_dir = Path(config.init_from) / rundir.TOKENIZERS_DIR
        logger.info("Vocabulary: %s's, copied from %s.", config.init_from, parent_dir)
        if session.chief:
            shutil.rmtree(tokenizers_dir, ignore_errors=True)
            shutil.copytree(parent_dir, tokenizers_dir)
        return load_tokenizers(parent_dir)
    logger.info("Vocabulary: %s, at most %d pieces%s.", config.tokenizer, config.vocab_size,
                ", shared by both languages" if config.shared_vocab else " per language")
    learn_params = config.tokenizer_learn_params
    if learn_params is not None and vocab_size_is_default(config):
        learn_params = {**learn_params, "grow_to_fit": True}  # a default must not stop the run
    tokenizers = build_tokenizers(
        corpus.pairs_for_vocabulary(), config.vocab_size, config.lower_case,
        kind=config.tokenizer, shared=config.shared_vocab, learn_params=learn_params,
    )
    if session.chief:
        # No rename dance is needed: config.json is written after the tokenizers,
        # and a directory without config.json is started anew on --resume.
        shutil.rmtree(tokenizers_dir, ignore_errors=True)
        save_tokenizers(tokenizers, tokenizers_dir)
    return tokenizers


def _training_pairs(session: _Session, config: RunConfig, data: _Data,
                    pairs: TokenizedPairs, start_step: int, seconds: float) -> TokenizedPairs:
    """The pairs that `fit` reads from `start_step` on, after `seconds` of training:
    `pairs` (the best split, or already drawn), or once the first epoch is over,
    as the sampling plan says (decided then, or read from the run directory)."""
    if not plan_needed(config, pairs, start_step):
        return pairs
    plan, new = sampling_plan(config, pairs, start_step, seconds, session.run_dir)
    if new:
        record_sampling_plan(session.write_dir, plan)
    return drawn_pairs(config, data.corpus.train, data.tokenizers, pairs, plan,
                                session.write_dir / rundir.TOKENS_DIR)


def _callbacks(session: _Session, config: RunConfig, data: _Data,
               state: _ModelState) -> list[keras.callbacks.Callback]:
    """The callbacks of `fit`, in order: the NaN stop and the clock come before
    the checkpoint saver."""
    run_dir = session.run_dir
    tokens_per_step = target_tokens_per_step(data.train_tokens, batches_per_pass(
        data.train_tokens, config.batch_tokens, batch_size=config.batch_size, seed=config.seed))
    callbacks = [LearningRateLogger(), StopOnNaN(run_dir / rundir.CHECKPOINTS_DIR), state.clock,
                 ProgressLog(session.started, config.steps_per_epoch, tokens_per_step),
                 ValidateMovingAverage()]
    if session.chief:
        metrics_csv = run_dir / rundir.METRICS_CSV
        rundir.truncate_metrics_csv(metrics_csv, state.initial_step // config.steps_per_epoch)
        callbacks.append(keras.callbacks.CSVLogger(str(metrics_csv), append=True))
    callbacks.append(CheckpointSaver(state.checkpoint_manager, config.checkpoint_every,
                                     functools.partial(rundir.record_checkpoint,
                                                       session.write_dir)))
    # The progress bar (when shown) finishes its line before the summary.
    callbacks.append(keras.callbacks.ProgbarLogger())
    callbacks.append(EpochSummary(config.epochs, state.clock))
    callbacks.append(KeepBest(session.write_dir, config.patience, read_best(session.write_dir)))
    if session.chief:
        # Epoch scalars only: train/ and validation/ event files, at step = epoch index.
        callbacks.append(keras.callbacks.TensorBoard(
            str(run_dir / rundir.LOGS_DIR), update_freq="epoch", write_graph=False,
            profile_batch=0,
        ))
    return callbacks
