"""Translating with the model that `transformer.decoding.ctranslate2_export` wrote, no TensorFlow.

`CTranslate2Translator(model_dir)` reads the export's `export.json`, tokenizes
with the shipped SentencePiece models (`sentencepiece`) and decodes with
`ctranslate2.Translator`, with the limits of the project's `Translator`. This
module imports neither TensorFlow nor the model code, so a machine that
serves translations needs only `ctranslate2` and `sentencepiece` besides it.

`CTranslate2Translator.translate(sentences, search)` runs the strategies of
`transformer.decoding.strategies` (`Greedy()`, `Beam(size, alpha, n_best)`,
`Sample(...)`, or any whose `ctranslate2_options()` gives CTranslate2's
options; one that cannot run here raises `NotSupportedError`, naming it) as
`transformer.decoding.translator.Translator` does, with the same scores (without a
vocabulary map; with one, see below); `translate.py --engine ctranslate2`
uses it. How the built-in ones map onto CTranslate2:

- Greedy decoding: `beam_size=1`. The score is `log P(Y | X)`, `[END]`
  included (`min_decoding_length=0`, see `transformer.decoding.ctranslate2_export`).
- Beam search: CTranslate2 keeps the project's beam (the `2k` best
  extensions, the `[END]`s among the first `k` finish, the `k` best others
  stay live) but ranks finished hypotheses by `log P / |Y| ** length_penalty`
  (`|Y|` the output tokens), where the project ranks them by
  `log P / lp(Y)` with the GNMT penalty `lp(Y) = ((5 + |Y|) / 6) ** alpha`
  (`Beam.score`, `|Y|` with `[END]`). No `length_penalty` gives that
  ranking, so the search runs with `length_penalty=alpha` and
  `return_end_token=True`, returns its `round(k * BEAM_PATIENCE)` finished
  hypotheses with their scores, `log P` is recovered as
  `score * |Y| ** alpha`, and the hypotheses are ranked again by
  `log P / lp(Y)`, the strategy's own `score`. One difference is left, when
  the search stops: with a penalty CTranslate2 stops once
  `round(k * patience)` hypotheses have finished, while the project goes on
  until none of the live ones, scored at their current length, beats the `k`
  best finished. A hypothesis that ends
  after one search stopped and before the other did can win in the longer
  one; with `patience = 1` CTranslate2 often stops first, hence
  `BEAM_PATIENCE` (the measured agreement is in BENCHMARKS.md). With
  `alpha = 0` both rank by `log P` and stop once the best hypothesis has
  ended, so the best is the same.
- Sampling: `sampling_topk` (0 for every token), `sampling_topp`,
  `sampling_temperature`, seeded with `ctranslate2.set_random_seed`. The
  draws are CTranslate2's, not TensorFlow's, so one seed gives other
  samples than the TensorFlow engine; the score is `log P(Y | X)` under the
  model itself, as the project's.

An export of a run trained on a shared vocabulary carries a vocabulary map
(`VOCABULARY_MAP_FILE`): the pieces the run's training targets use, the
target language's share of the vocabulary. With it (`use_vmap`, the default
when the export has one) CTranslate2 projects onto those pieces only, which
makes each decoding step cheaper, and the softmax runs over them: every
score, `log P` included, and every sampling draw are the model's
renormalized over the pieces a translation can use. A greedy translation is
the model's whenever the model's own would use those pieces only; a beam's
ranking may change. `use_vmap=False` gives the model's own scores.

Every sentence has its own output limit (`min(max_length, source tokens +
extra_length)`) and CTranslate2 one per call, so, as `Translator` does, a
first pass decodes batches of sentences sorted by their limit with the
smallest limit of the batch, and the sentences whose search reached that
limit are decoded again, grouped by their own limit. A search that stopped
before its limit has the output a higher limit gives (with a length penalty
CTranslate2 stops after `round(k * patience)` hypotheses, so a search that
reached its last step returns one of its last hypotheses, which is how the
first pass tells).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path

from transformer import rundir  # standard library only
from transformer.constants import (
    DEFAULT_EXTRA_LENGTH,
    DEFAULT_MAX_OUTPUT_LENGTH,
    END_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
)
from transformer.decoding.strategies import BEAM_PATIENCE, Greedy, check_strategy

logger = logging.getLogger(__name__)

__all__ = [
    "BEAM_PATIENCE",
    "CLI_QUANTIZATIONS",
    "CTRANSLATE2_BATCH_SIZE",
    "CTranslate2Translator",
    "EXPORT_INFO_FILE",
    "Hypothesis",
    "VOCABULARY_MAP_FILE",
    "ctranslate2_module",
    "gnmt_length_penalty",
    "run_export_dir",
    "run_export_is_current",
    "usable_cores",
    "write_run_export",
]

# The file of an export that names the tokenizer files and the model's limits.
EXPORT_INFO_FILE = "export.json"
# CTranslate2's vocabulary map in an export: the target pieces a translation may
# use (`transformer.decoding.ctranslate2_export.write_vocabulary_map`).
VOCABULARY_MAP_FILE = "vmap.txt"
_INSTALL_HINT = "pip install 'transformer-tutorial[ctranslate2]' (or 'ctranslate2>=4.5,<5')"

# Sentences CTranslate2 decodes together (sorted by their output limit): fewer
# than the TensorFlow engine's `TRANSLATE_BATCH_SIZE`, which amortizes the
# calls of a traced loop that CTranslate2 does not have; a smaller batch keeps
# each step's states small (the speeds: BENCHMARKS.md, "Decoding engines and
# speed").
CTRANSLATE2_BATCH_SIZE = 32

# The weight types of the command lines (`export_ctranslate2` takes more).
CLI_QUANTIZATIONS = ("float32", "int8")

# What `export.json` of a run's own export records of the model file it was
# converted from; a model file that differs is converted again.
_SOURCE_KEY = "run_model_file"

_START, _END, _UNK = RESERVED_TOKENS[START_ID], RESERVED_TOKENS[END_ID], RESERVED_TOKENS[UNK_ID]
_SPACE = "\u2581"  # SentencePiece's space, "▁"


def ctranslate2_module():
    """The `ctranslate2` module, or an ImportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as err:
        raise ImportError(
            f"Running or exporting to CTranslate2 needs the ctranslate2 package: {_INSTALL_HINT}"
        ) from err
    return ctranslate2


def usable_cores() -> int:
    """The CPU cores this process may run on (`taskset` included)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        return os.cpu_count() or 1


def gnmt_length_penalty(length, alpha) -> float:
    """`lp(Y) = ((5 + |Y|) / 6) ** alpha`: `transformer.decoding.search.length_penalty`
    for numbers, the penalty `Beam.score` divides by."""
    return ((5.0 + length) / 6.0) ** alpha


# --- A run's own export ----------------------------------------------------------------------

def run_export_dir(run_dir, quantization="float32") -> Path:
    """Where a run keeps its CTranslate2 export: `RUN/ctranslate2-<quantization>`."""
    return Path(run_dir) / f"ctranslate2-{quantization}"


# The version of what `write_run_export` writes: a run's export of an older
# one is converted again (2: the vocabulary map).
_RUN_EXPORT_VERSION = 2


def _model_stamp(run_dir) -> dict:
    stat = (Path(run_dir) / rundir.MODEL_FILE).stat()
    return {"mtime_ns": stat.st_mtime_ns, "size": stat.st_size, "export": _RUN_EXPORT_VERSION}


def run_export_is_current(run_dir, quantization="float32") -> bool:
    """Whether `run_export_dir` holds an export of the run's present model file."""
    info = run_export_dir(run_dir, quantization) / EXPORT_INFO_FILE
    try:
        recorded = json.loads(info.read_text(encoding="utf-8")).get(_SOURCE_KEY)
        return recorded == _model_stamp(run_dir)
    except (OSError, ValueError, AttributeError):
        return False


def write_run_export(run_dir, quantization, export) -> Path:
    """Writes a run's export into `run_export_dir` atomically; returns that directory.

    `export(directory)` writes the export (`transformer.decoding.ctranslate2_export`)
    into a fresh temporary directory beside it, which then replaces the old
    export by renames: a reader sees the old export or the new one, and a
    failure leaves the old one. The model file's time and size go into
    `export.json`, for `run_export_is_current`.
    """
    run_dir = Path(run_dir)
    target = run_export_dir(run_dir, quantization)
    stamp = _model_stamp(run_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}{rundir.TMP_SUFFIX}-", dir=run_dir))
    old = tmp.with_name(tmp.name + "-old")
    try:
        export(tmp / "model")
        info_path = tmp / "model" / EXPORT_INFO_FILE
        info = json.loads(info_path.read_text(encoding="utf-8"))
        rundir.write_json_atomic(info_path, {**info, _SOURCE_KEY: stamp})
        if target.exists():
            os.replace(target, old)
        os.replace(tmp / "model", target)
    except OSError:
        if not run_export_is_current(run_dir, quantization):  # not another process's
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return target


# --- Translating -----------------------------------------------------------------------------

@dataclasses.dataclass
class Hypothesis:
    """One translation of `CTranslate2Translator.translate`, with the fields
    `translate.py` prints of a `transformer.decoding.translator.Translation`.

    Attributes:
        text: the translation (`""` for an empty sentence).
        tokens: `[START]`, the output's pieces, and `[END]` when it was
            produced (empty for an empty sentence).
        input_tokens: the source's pieces as the model saw them, `[START]`
            ... `[END]` (pieces outside the vocabulary as `[UNK]`).
        score: what the search ranks by: `log P / lp(Y)` for a beam, else `log P`.
        log_prob: `log P(Y | X)` (`-inf` for an empty sentence), over the
            vocabulary map's pieces when one is used.
    """

    text: str
    tokens: list[str]
    input_tokens: list[str]
    score: float
    log_prob: float


class CTranslate2Translator:
    """Strings in, strings out, with an exported model: `ctranslate2` and
    `sentencepiece` only, no TensorFlow (see the module docstring).

    Sources are trimmed to the model's `max_length` tokens and each output
    gets at most `min(max_length, input length + extra_length)` tokens,
    `[END]` included, as the project's `Translator` does.

    Args:
        model_dir: a directory written by `export_ctranslate2` with
            SentencePiece tokenizers.
        device, compute_type, **kwargs: for `ctranslate2.Translator`
            (e.g. `compute_type="int8"`, `inter_threads`, `intra_threads`).
            `intra_threads` defaults to the cores this process may run on
            (`usable_cores`), not CTranslate2's 4: more OpenMP threads than
            cores wait on each other and decode many times slower.
        use_vmap: project onto the pieces of the export's vocabulary map
            only (see the module docstring); None (the default) does when the
            export has one.

    Example:

    ```python
    translator = CTranslate2Translator("runs/x/ctranslate2-float32")
    translator(["este é um problema que temos que resolver."], beam_size=4)
    translator.translate(["o gato"], search=Beam(4, 0.6))[0].text
    ```
    """

    def __init__(self, model_dir, device="cpu", compute_type="default", use_vmap=None,
                 **kwargs):
        import sentencepiece as spm

        model_dir = Path(model_dir)
        info = json.loads((model_dir / EXPORT_INFO_FILE).read_text(encoding="utf-8"))
        if info["tokenizer"] != "sentencepiece":
            raise ValueError(
                f"{str(model_dir)!r} was exported with {info['tokenizer']} tokenizers; "
                "CTranslate2Translator needs SentencePiece (translate the tokens of "
                "source_tokens() with ctranslate2.Translator instead)."
            )
        self.source = spm.SentencePieceProcessor(model_file=str(model_dir / info["source_model"]))
        self.target = spm.SentencePieceProcessor(model_file=str(model_dir / info["target_model"]))
        self.max_input_length = int(info["max_input_length"])
        has_map = (model_dir / VOCABULARY_MAP_FILE).is_file()
        if use_vmap and not has_map:
            raise ValueError(f"{str(model_dir)!r} has no vocabulary map ({VOCABULARY_MAP_FILE}) "
                             "for use_vmap=True.")
        self.use_vmap = has_map if use_vmap is None else bool(use_vmap)
        if device == "cpu":
            kwargs.setdefault("intra_threads", usable_cores())
        self.translator = ctranslate2_module().Translator(
            str(model_dir), device=device, compute_type=compute_type, **kwargs)

    def tokenize(self, sentences) -> list[list[str]]:
        """The source pieces of each sentence (no `[START]`/`[END]`), trimmed to fit."""
        rows = self.source.encode(list(sentences), out_type=str)
        return [row[: self.max_input_length - 2] for row in rows]

    def _limits(self, tokens, max_length, extra_length):
        """Each sentence's most output tokens, as `transformer.decoding.pipeline.output_limits`."""
        max_length = min(int(max_length), self.max_input_length)
        return [max_length if extra_length is None
                else min(max_length, len(row) + int(extra_length)) for row in tokens]

    def __call__(self, sentences, beam_size=1, length_penalty=0.0,
                 max_length=DEFAULT_MAX_OUTPUT_LENGTH, extra_length=DEFAULT_EXTRA_LENGTH,
                 **kwargs) -> list[str]:
        """Translates a list of sentences (beam search for `beam_size > 1`).

        `max_length` caps every output and `extra_length` (None for no such
        limit) each sentence's beyond its number of source tokens, `[END]`
        included, as in `transformer.decoding.pipeline.output_limits`. More
        `ctranslate2.Translator.translate_batch` options may be passed. The
        beam ranks by CTranslate2's own `length_penalty`; `translate` ranks
        as the project does.
        """
        tokens = self.tokenize(sentences)
        texts = [""] * len(tokens)
        # One call per output limit, so that each sentence gets its own.
        limits = self._limits(tokens, max_length, extra_length)
        for limit in sorted(set(limits)):
            rows = [i for i, row_limit in enumerate(limits) if row_limit == limit]
            results = self.translator.translate_batch(
                [tokens[i] for i in rows], beam_size=beam_size, length_penalty=length_penalty,
                max_input_length=0, max_decoding_length=limit,  # trimmed by `tokenize`
                **{"min_decoding_length": 0, "use_vmap": self.use_vmap, **kwargs},
            )
            for i, result in zip(rows, results, strict=True):
                texts[i] = self.detokenize(result.hypotheses[0]) if tokens[i] else ""
        return texts

    def detokenize(self, pieces) -> str:
        """The text of output pieces, as the project's tokenizer writes it.

        SentencePiece's decoder drops every space before the first character;
        the project's (`tensorflow_text`) drops only the one that starts the
        first piece, so an output that starts with a piece `▁` keeps a space.
        """
        text = self.target.decode(list(pieces))
        joined = "".join(pieces)
        spaces = len(joined) - len(joined.lstrip(_SPACE)) - 1
        return " " * spaces + text if spaces > 0 and not text.startswith(" ") else text

    def translate(self, sentences, search=Greedy(),  # noqa: B008 - a frozen object
                  max_length=DEFAULT_MAX_OUTPUT_LENGTH, extra_length=DEFAULT_EXTRA_LENGTH,
                  batch_size=CTRANSLATE2_BATCH_SIZE):
        """Translates a list of strings with a strategy of `transformer.decoding.strategies`.

        Args:
            sentences: a list of strings.
            search: a strategy object, `Greedy()`, `Beam(size, alpha, n_best)`,
                `Sample(...)` or another whose `ctranslate2_options()` runs here.
            max_length, extra_length: the output limits (see `__call__`).
            batch_size: sentences decoded together.

        Returns:
            A `Hypothesis` per sentence; for a strategy with
            `results_per_sentence > 1` (a beam's `n_best > 1`), a list of that
            many, best first (fewer if fewer finished).

        Raises:
            transformer.decoding.strategies.NotSupportedError: a strategy that
                CTranslate2 cannot run.
        """
        check_strategy(search)
        tokens = self.tokenize(sentences)
        for sentence, row in zip(sentences, tokens, strict=True):
            full = len(row) == self.max_input_length - 2
            if full and len(self.source.encode(sentence)) > len(row):
                logger.warning("Sentence %r has more tokens than the model's max_length=%d; "
                               "trimmed to its first %d tokens and [END].", sentence[:40],
                               self.max_input_length, self.max_input_length - 1)
        options = search.ctranslate2_options()
        seed = search.random_seed()
        if seed is not None:
            ctranslate2_module().set_random_seed(seed)
        limits = self._limits(tokens, max_length, extra_length)
        outputs = self._decode(tokens, limits, options, batch_size)
        settings = search.settings()  # as numbers, for `score`
        results = []
        for row, output in zip(tokens, outputs, strict=True):
            hypotheses = self._hypotheses(row, output, search, options["length_penalty"],
                                          settings)
            results.append(hypotheses if search.results_per_sentence > 1 else hypotheses[0])
        return results

    def _decode(self, tokens, limits, options, batch_size):
        """CTranslate2's result of each sentence, at its own limit (see the module
        docstring); None for an empty sentence."""
        outputs = [None] * len(tokens)
        order = sorted((i for i, row in enumerate(tokens) if row), key=lambda i: limits[i])
        # First pass: batches of sentences sorted by limit, each at its smallest limit.
        batches = [order[start: start + batch_size] for start in range(0, len(order), batch_size)]
        again = []
        for batch in batches:
            limit = limits[batch[0]]
            for i, result in zip(batch, self._batch(tokens, batch, limit, options, batch_size),
                                 strict=True):
                outputs[i] = result
                if limit < limits[i] and max(map(len, result.hypotheses)) >= limit:
                    again.append(i)
        # The sentences the first pass stopped at its limit, each at its own.
        for limit in sorted({limits[i] for i in again}):
            batch = [i for i in again if limits[i] == limit]
            for i, result in zip(batch, self._batch(tokens, batch, limit, options, batch_size),
                                 strict=True):
                outputs[i] = result
        return outputs

    def _batch(self, tokens, rows, limit, options, batch_size):
        return self.translator.translate_batch(
            [tokens[i] for i in rows], max_batch_size=batch_size, max_input_length=0,
            max_decoding_length=limit, min_decoding_length=0, return_end_token=True,
            return_scores=True, use_vmap=self.use_vmap, **options)

    def _hypotheses(self, tokens, output, search, penalty, settings):
        """The `Hypothesis`es of one sentence, best first, ranked as the project
        ranks: by the strategy's own `score` (`settings`: its settings)."""
        input_tokens = [_START, *(piece if self.source.piece_to_id(piece) != UNK_ID else _UNK
                                  for piece in tokens), _END]
        if output is None:  # an empty sentence
            count = search.results_per_sentence
            return [Hypothesis("", [], input_tokens, -math.inf, -math.inf)] * count
        hypotheses = []
        for pieces, score in zip(output.hypotheses, output.scores, strict=True):
            log_prob = score * len(pieces) ** penalty  # CTranslate2's score is log P / |Y| ** lp
            body = pieces[:-1] if pieces and pieces[-1] == _END else pieces
            hypotheses.append(Hypothesis(
                text=self.detokenize(body), tokens=[_START, *pieces],
                input_tokens=input_tokens,
                score=search.score(log_prob, float(len(pieces)), settings), log_prob=log_prob))
        hypotheses.sort(key=lambda h: -h.score)  # stable: CTranslate2's order among ties
        return hypotheses[: search.results_per_sentence]
