"""Fixtures shared by the test files.

`tiny_run` trains a tiny translator once per test session with
`transformer.run.train`, exactly as `train.py` does, and hands back its
`TrainResult`: `tiny_run.run_dir` is a complete run directory (config.json,
tokenizers/, model.keras, checkpoints/, metrics.csv, metrics.json, logs/ and,
when `transformer.decoding.translator` can export, export/). `run_dir`, `test_pairs` and
`translator` are that run's directory, test pairs and `Translator`, shared by
every file that uses them (no test may modify them; the translator's
pipelines have fixed signatures, so sharing it traces each of them once).

`real_text_run` trains another small run the way `train.py` trains a real
corpus (the recipe of `transformer.run.recipes.CORPUS_DEFAULTS`: token-budget
batches, one shared vocabulary with tied embeddings, pre-norm, a numeric
peak rate, a moving average, beam-4 evaluation), with a non-zero seed and a
decoder shallower than its encoder: the settings real runs use, which the
toy-settings `tiny_run` does not reach (tests/test_real_text_run.py).

`tiny_reference_run` is tests/test_run_trainer.py's reference: three epochs
of its tiny settings (`TINY`, a 16-wide model on 120 toy pairs), without the
test evaluation; that file compares its weights, and tests/test_run_adapt.py
adapts it to another corpus.

These runs are trained once per test session, not once per pytest-xdist
worker: the first worker that needs one trains it under a file lock in the
session's temporary directory and leaves the `TrainResult` there (pickled);
the other workers wait for the lock and read it (`shared_by_the_workers`). A
worker that did not train it reads the run directory under the other's
temporary directory, so the rule that no test modifies them holds across
processes too.

The slowest files run first. `--dist loadfile` hands whole files to the
workers, by default those with the most tests first, which left the few-test
files that start processes and train (the notebooks, the backends) to run
alone at the end; `SLOWEST_FIRST` orders the files instead, slowest first,
and the others follow in their usual order.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from pathlib import Path

import pytest

try:
    import fcntl
except ImportError:  # not on Windows: each worker trains its own runs there
    fcntl = None


def _share_the_cores() -> None:
    """Each pytest-xdist worker's TensorFlow, and the processes it starts, takes
    its share of the cores for an op's threads (`TF_NUM_INTRAOP_THREADS`): with
    a pool of every core in each worker, the workers' threads outnumber the
    cores and wait on each other. Set before TensorFlow is imported; a value
    already in the environment is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
        os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(1, cores // workers)))


_share_the_cores()

# A thousand toy pairs, a one-layer model and 150 steps: about 30 s on two CPU
# cores. It is not a good translator (about 70% of the test tokens right), but
# its outputs follow their sources and end. Two vocabularies, not the corpus
# default's shared one: tied to one 32-wide matrix, this model spends its first
# few hundred steps on English alone and gives every source the same output.
TINY_CORPUS = {"n_train": 1000, "n_valid": 32, "n_test": 64}
TINY_MODEL = {
    "num_layers": 1,
    "d_model": 32,
    "num_heads": 2,
    "dff": 64,
    "dropout_rate": 0.0,
    "max_length": 32,
}
TINY_TRAINING = {
    "batch_size": 32,
    "epochs": 2,
    "steps_per_epoch": 75,
    "warmup_steps": 100,
    # The paper's peak for that warm-up, (d_model * 100)^-0.5: a few steps learn.
    "learning_rate": "paper",
    # The paper's decay, whose rates tests/test_run_callbacks.py checks by hand.
    "decay": "inverse_sqrt",
    "shared_vocab": False,
    "label_smoothing": 0.0,
    "precision": "float32",
    "checkpoint_every": 50,
    "eval_batch_size": 64,
    "eval_beam_size": 1,
}


# The slowest first: the notebooks and the backends start kernels and processes
# that import TensorFlow and train; the resume, trainer and README files held
# most of the 25 slowest tests of these files measured on one core; the rest
# start processes, train or export. Every other file follows in collection
# order. Only the order of whole files changes.
SLOWEST_FIRST = (
    "test_notebooks.py",
    "test_backends.py",
    "test_run_resume.py",
    "test_run_trainer.py",
    "test_readme.py",
    "test_train_cli.py",
    "test_translate_cli.py",
    "test_serve.py",
    "test_distributed_training.py",
    "test_run_best.py",
    "test_export.py",
    "test_export_ctranslate2.py",
    "test_real_text_run.py",
)


def pytest_configure(config):
    """Schedules files in collection order rather than by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's --dist loadfile
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The files of `SLOWEST_FIRST` first, in that order; each file's tests keep theirs."""
    rank = {name: index for index, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOWEST_FIRST)))


def write_toy_tsv(directory, seed=0, n_train=200, n_valid=16, n_test=16):
    """Writes train/valid/test TSV files of toy pairs; returns their three paths."""
    from transformer.data import generate_toy_corpus, write_tsv

    corpus = generate_toy_corpus(seed=seed, n_train=n_train, n_valid=n_valid, n_test=n_test)
    paths = []
    for split in ("train", "valid", "test"):
        path = directory / f"{split}.tsv"
        write_tsv(getattr(corpus, split), path)
        paths.append(path)
    return tuple(paths)


@contextlib.contextmanager
def without_test_evaluation():
    """Within it, `transformer.run.train` skips the test split's evaluation, as it
    does for a corpus without test pairs (`evaluation` None, no examples): for
    the runs of tests that read none of it (resumes, weights, schedules). Each
    run otherwise traces its new model's translation once more, about a tenth
    of a tiny run's time. The weights, their fingerprint, the checkpoints and
    metrics.csv are made before the evaluation and do not change."""
    from transformer.run import trainer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "_evaluate", lambda config, data, model: (None, []))
        yield


def shared_by_the_workers(tmp_path_factory, name, make):
    """`make(tmp_path_factory)`, computed once per test session and shared by the
    pytest-xdist workers through a file lock and a pickle in the session's
    temporary directory (the parent of each worker's own); without xdist (or
    `fcntl`), simply `make(tmp_path_factory)`."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None or fcntl is None:
        return make(tmp_path_factory)
    root = tmp_path_factory.getbasetemp().parent
    # The test run's id as well: a --basetemp given again is not emptied for it.
    name = f"{name}-{os.environ.get('PYTEST_XDIST_TESTRUNUID', '')}"
    saved = root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if saved.is_file():
            return pickle.loads(saved.read_bytes())
        result = make(tmp_path_factory)
        partial = saved.with_suffix(".partial")
        partial.write_bytes(pickle.dumps(result))
        partial.replace(saved)
        return result


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A small trained run (a `transformer.run.TrainResult`); see the module docstring."""
    return shared_by_the_workers(tmp_path_factory, "tiny_run", _train_tiny_run)


def _train_tiny_run(tmp_path_factory):
    from transformer.model_config import TransformerConfig
    from transformer.run import RunConfig, train

    data_dir = tmp_path_factory.mktemp("tiny_data")
    train_tsv, valid_tsv, test_tsv = write_toy_tsv(data_dir, **TINY_CORPUS)
    config = RunConfig(
        output_dir=str(tmp_path_factory.mktemp("tiny_run") / "run"),
        data=str(train_tsv),
        valid=str(valid_tsv),
        test=str(test_tsv),
        model=TransformerConfig(**TINY_MODEL),
        **TINY_TRAINING,
    )
    return train(config, verbose=0)


@pytest.fixture(scope="session")
def run_dir(tiny_run):
    """The session's tiny trained run directory; tests must not modify it."""
    return Path(tiny_run.run_dir)


@pytest.fixture(scope="session")
def test_pairs(tiny_run):
    """The tiny run's test pairs, `(source, reference)`."""
    from transformer.data import read_tsv

    return read_tsv(tiny_run.config.test)


@pytest.fixture(scope="session")
def translator(run_dir):
    """A `Translator` of the tiny run."""
    from transformer.decoding.translator import Translator

    return Translator.from_run(run_dir)


# tests/test_run_trainer.py's tiny settings: a 16-wide model, five steps an epoch.
TINY = {
    "model": {"num_layers": 1, "d_model": 16, "num_heads": 2, "dff": 32, "dropout_rate": 0.0,
              "max_length": 32},
    "batch_size": 16,
    "steps_per_epoch": 5,
    "warmup_steps": 10,
    # The paper's peak for that warm-up, (d_model * warmup_steps)^-0.5.
    "learning_rate": "paper",
    "label_smoothing": 0.1,
    "precision": "float32",
    "num_examples": 2,
    "eval_batch_size": 32,
    "eval_beam_size": 1,
}


def tiny_config(tsv, output_dir, **changes):
    """A `RunConfig` of `TINY` on the `(train, valid, test)` files `tsv`, with `changes`."""
    from transformer.run import RunConfig

    train_tsv, valid_tsv, test_tsv = tsv
    settings = {**TINY, **changes}
    return RunConfig(output_dir=str(output_dir), data=str(train_tsv), valid=str(valid_tsv),
                     test=str(test_tsv), **settings)


@pytest.fixture(scope="session")
def tiny_reference_run(tmp_path_factory):
    """A `TrainResult` of tests/test_run_trainer.py's tiny settings; see the module docstring."""
    return shared_by_the_workers(tmp_path_factory, "tiny_reference_run",
                                 _train_tiny_reference_run)


def _train_tiny_reference_run(tmp_path_factory):
    from transformer import run

    tsv = write_toy_tsv(tmp_path_factory.mktemp("tiny_tsv"), n_train=120, n_valid=16, n_test=16)
    run_dir = tmp_path_factory.mktemp("tiny_reference") / "run"
    with without_test_evaluation():
        return run.train(tiny_config(tsv, run_dir, epochs=3), verbose=0, export=False)


# The real-text recipe on a small model: two encoder layers, one decoder layer,
# a short `max_length` so that tests reach it, and seed 3.
REAL_TEXT_MODEL = {"num_layers": 2, "num_decoder_layers": 1, "d_model": 32, "num_heads": 2,
                   "dff": 64, "max_length": 24}
REAL_TEXT_SEED = 3


@pytest.fixture(scope="session")
def real_text_run(tmp_path_factory):
    """A small run with the real-text recipe (a `TrainResult`); see the module docstring."""
    return shared_by_the_workers(tmp_path_factory, "real_text_run", _train_real_text_run)


def _train_real_text_run(tmp_path_factory):
    from transformer.run import RunConfig, train
    from transformer.run.recipes import default_model

    data_dir = tmp_path_factory.mktemp("real_text_data")
    train_tsv, valid_tsv, test_tsv = write_toy_tsv(data_dir, seed=5, n_train=1000, n_valid=32,
                                                   n_test=32)
    config = RunConfig(
        output_dir=str(tmp_path_factory.mktemp("real_text_run") / "run"),
        data=str(train_tsv), valid=str(valid_tsv), test=str(test_tsv),
        model=default_model("tutorial", data=str(train_tsv), **REAL_TEXT_MODEL),
        seed=REAL_TEXT_SEED, epochs=2, steps_per_epoch=40, vocab_size=120,
        precision="float32", checkpoint_every=40,
    )
    return train(config, verbose=0, export=False)
