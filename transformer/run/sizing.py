"""The time budget chooses the model: the size rule and the speed calibration it reads.

A real corpus's run with a `--time-budget` and no model option (the recipe's
preset `"auto"`) trains the largest size of `SIZE_LADDER` that the budget can
feed: one whose effective tokens are at least `TOKENS_PER_PARAMETER` times
its body parameters (those of its layers, without the embeddings). Its
planned tokens are the updates this machine makes of that size in the
budget, measured (at `RUN_SPEED_SHARE` of the measured steps' speed), times
the token budget of a batch (`batch_tokens`); the
effective ones count repeated passes over the corpus (its pairs times their
mean padded length) at a value that decays as Muennighoff et al. (2023,
"Scaling Data-Constrained Language Models") fitted (`effective_tokens`).
The form is that of compute-optimal sizing (Hoffmann et al., 2022:
parameters grow with the tokens a run can train on). A size is fed too when
the budget lets it make `PASSES` passes over a corpus of at least
`CORPUS_TOKENS_PER_PARAMETER` tokens per body parameter: a small corpus that
the smaller size would finish early (a run stops after its epochs) then
trains a larger model rather than leave the budget unused. Longer budgets
and faster machines (a GPU, more cores) thus get larger models, and the
choice never shrinks as the budget grows. The thresholds are fitted to BLEU
against minutes for each size on the development corpora (BENCHMARKS.md,
"The budget chooses the model"); `fed` applies them.

The machine's speed is measured at the start of the run, and only as far as
the choice needs it (`size_rule`): a few training steps of a size at the
run's batch shape and precision (`transformer.run.calibration.measure_step`)
give its tokens a second. The ladder is climbed from the size after the
smallest: a size is measured only when the one below it was fed and it could
be fed itself at that one's speed (a dearer size is never faster), so every
choice rests on measured speeds and a short budget measures one size. The
sizes not measured are estimated, for the record, through the measured ones
(`Speed`: a step's fixed cost and its cost per multiply-add, `token_cost`).
The choice, the measured step times and every candidate's figures are
recorded in `config.json` (`size_rule`), so a resume keeps the model; the log
says what was chosen and why in one line.

Without a time budget the run is sized by its epochs and trains the
`REFERENCE_PRESET`; a multi-worker run does too, since its workers would each
measure their own speed. Any model option or `--preset` overrides the rule.
Plain Python (no TensorFlow at import); the measurement itself is
`transformer.run.calibration`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from transformer.model_config import PRESETS, TransformerConfig

# The recipe's preset of a real corpus: this module chooses the size.
AUTO_PRESET = "auto"
# The model before the choice (its `max_length` sizes the tokens), and the one
# that model options change when no --preset is given.
REFERENCE_PRESET = "tutorial"
# The sizes the rule chooses from, smallest first: each has more body
# parameters and costs more a token than the one before.
SIZE_LADDER = ("small", "tutorial", "medium", "large")
# A size is trained when the budget gives it at least this many effective
# tokens per body parameter: `bench/model_sizes.py`'s fit of
# bench/results/model_sizes_zen4.json (BENCHMARKS.md, "The budget chooses the
# model"): of the thresholds with the fewest wrong choices over the
# comparisons of a size with the next smaller one that the passes below do
# not decide, the start of the highest
# range (the first tenth above a losing ratio), since a larger size chosen too
# early costs more than one chosen late.
TOKENS_PER_PARAMETER = 14.9
# A size is also trained when the budget lets it make at least `PASSES` passes
# over the corpus (its epochs allowing) and the corpus has at least
# `CORPUS_TOKENS_PER_PARAMETER` tokens per body parameter: a small corpus that
# the smaller size would finish with time to spare feeds a larger one, never
# larger for its corpus than one measured to win so. `bench/model_sizes.py`'s
# fit of the same results: the fewest passes at which a larger size won,
# rounded down to a tenth (the top of the range above the most at which one
# lost: the speed the rule plans with is an estimate, and a larger size
# chosen too early costs more than one chosen late);
# the corpus's tokens per body parameter of the lowest such win, rounded down
# to a thousandth.
PASSES = 14.5
CORPUS_TOKENS_PER_PARAMETER = 0.04
# A run trains at about this share of the speed its steps are measured at
# (`measure_step`: the same batch again, nothing else): the run also
# validates, reads its batches, averages its weights and saves checkpoints.
# From runs against the measurement of their size at their batch shape
# (BENCHMARKS.md, "The budget chooses the model").
RUN_SPEED_SHARE = 0.8
# Repeated passes over the corpus are worth a unique pass's tokens times
# exp(-repeats / REPEAT_DECAY) (Muennighoff et al., 2023, their fitted R*_D).
REPEAT_DECAY = 15.4


def body_parameters(model: TransformerConfig) -> int:
    """The weights of the model's layers without embeddings, biases or norms:
    4 d^2 + 2 d dff an encoder layer, 8 d^2 + 2 d dff a decoder layer.

    >>> body_parameters(PRESETS["tutorial"])
    1835008
    """
    d, dff = model.d_model, model.dff
    return model.num_layers * (4 * d * d + 2 * d * dff) + \
        model.decoder_layers * (8 * d * d + 2 * d * dff)


def parameter_count(model: TransformerConfig, input_vocab_size: int,
                    target_vocab_size: int) -> int:
    """Every weight of `transformer.model.build_model(model, ...)`, counted without
    building it: the layers with their biases and norms, the embeddings, and the
    output projection (the target embedding itself when tied).

    >>> parameter_count(PRESETS["base"], 37000, 37000) // 10**6  # tie_embeddings=False
    101
    """
    d, dff = model.d_model, model.dff
    attention = 4 * (d * d + d)
    feed_forward = 2 * d * dff + dff + d
    encoder_layer = attention + feed_forward + 2 * (2 * d)
    decoder_layer = 2 * attention + feed_forward + 3 * (2 * d)
    total = model.num_layers * encoder_layer + model.decoder_layers * decoder_layer
    if model.normalize_first:
        total += 2 * (2 * d)  # the final norms of the encoder and the decoder
    if model.tie_embeddings:
        return total + target_vocab_size * d
    return total + (input_vocab_size + target_vocab_size) * d + d * target_vocab_size + \
        target_vocab_size


def token_cost(model: TransformerConfig, vocab_size: int, mean_tokens: float) -> float:
    """Multiply-adds of the forward pass per target token: the body's weights,
    the output projection (d x vocabulary) and the attention's QK^T and AV over
    `mean_tokens` keys (the encoder's, the decoder's own and the cross-attention).

    >>> round(token_cost(PRESETS["tutorial"], 4000, 20) / 1e6, 2)
    2.41
    """
    d = model.d_model
    attention = 2 * mean_tokens * d * (model.num_layers + 2 * model.decoder_layers)
    return body_parameters(model) + d * vocab_size + attention


@dataclasses.dataclass(frozen=True)
class Speed:
    """A training step's time on this machine: `step_seconds` + `seconds_per_cost` times
    the batch's tokens times `token_cost`.

    >>> speed = Speed(step_seconds=0.05, seconds_per_cost=1e-10)
    >>> round(speed.tokens_per_second(2.0e6, 400))
    3077
    """

    step_seconds: float
    seconds_per_cost: float

    def step(self, cost: float, batch_tokens: int) -> float:
        """The seconds of a step of `batch_tokens` tokens of `cost` each."""
        return self.step_seconds + self.seconds_per_cost * cost * batch_tokens

    def tokens_per_second(self, cost: float, batch_tokens: int) -> float:
        """Tokens a second in steps of `batch_tokens` tokens."""
        return batch_tokens / self.step(cost, batch_tokens)

    @classmethod
    def through(cls, points: list[tuple[float, float]], batch_tokens: int) -> Speed:
        """The speed through measured (token cost, step seconds) points, cheapest
        first: through the last two, or through the origin and a single one (no
        fixed cost assumed). Through the origin and the first of the two too
        when they disagree with a fixed cost (a fixed cost below zero, or the
        second step not dearer)."""
        cost_a, seconds_a = points[-2] if len(points) > 1 else points[-1]
        origin = cls(0.0, seconds_a / (cost_a * batch_tokens))
        if len(points) < 2:
            return origin
        cost_b, seconds_b = points[-1]
        slope = (seconds_b - seconds_a) / ((cost_b - cost_a) * batch_tokens)
        fixed = seconds_a - slope * cost_a * batch_tokens
        return origin if slope <= 0 or fixed < 0 else cls(fixed, slope)


def candidate_model(preset: str, base: TransformerConfig) -> TransformerConfig:
    """`preset`'s sizes with the run's other model settings (dropout, norms, tying)."""
    sizes = PRESETS[preset]
    return dataclasses.replace(base, num_layers=sizes.num_layers, num_decoder_layers=None,
                               d_model=sizes.d_model, num_heads=sizes.num_heads,
                               dff=sizes.dff)


def effective_tokens(planned: float, corpus_tokens: float) -> float:
    """`planned` tokens of passes over a corpus of `corpus_tokens`, the repeats
    counted as Muennighoff et al. (2023) fitted: the first pass whole, then
    `corpus_tokens * REPEAT_DECAY * (1 - exp(-repeats / REPEAT_DECAY))`.

    >>> effective_tokens(500, 1000), round(effective_tokens(11000, 1000))
    (500, 8355)
    """
    if corpus_tokens <= 0 or planned <= corpus_tokens:
        return planned
    repeats = planned / corpus_tokens - 1
    return corpus_tokens * (1 + REPEAT_DECAY * (1 - math.exp(-repeats / REPEAT_DECAY)))


def candidate_row(model: TransformerConfig, tokens_per_second: float, budget_seconds: float,
                  corpus_tokens: int, max_tokens: float | None = None) -> dict:
    """A size's tokens a second, its planned and effective tokens in the budget
    (at most `max_tokens`, what the run's epochs allow, whatever the budget),
    its body parameters and their ratio (`tokens_per_parameter`), its passes
    over the corpus (planned over `corpus_tokens`), the corpus's tokens per body
    parameter, and whether the rule would train it (`fed`)."""
    params = body_parameters(model)
    planned = tokens_per_second * budget_seconds
    if max_tokens is not None:
        planned = min(planned, max_tokens)
    effective = effective_tokens(planned, corpus_tokens)
    figures = {"tokens_per_parameter": effective / params,
               "passes": planned / corpus_tokens if corpus_tokens > 0 else 0.0,
               "corpus_tokens_per_parameter": corpus_tokens / params}
    return {"tokens_per_second": round(tokens_per_second, 1),
            "planned_tokens": round(planned),
            "effective_tokens": round(effective),
            "body_parameters": params,
            "tokens_per_parameter": round(figures["tokens_per_parameter"], 3),
            "passes": round(figures["passes"], 2),
            "corpus_tokens_per_parameter": round(figures["corpus_tokens_per_parameter"], 5),
            "fed": fed(**figures)}


def fed(tokens_per_parameter: float, passes: float, corpus_tokens_per_parameter: float,
        thresholds: tuple[float | None, float | None, float | None] | None = None) -> bool:
    """Whether the rule trains a size: enough effective tokens per body
    parameter, or enough passes over a corpus large enough for it.
    `thresholds` (`TOKENS_PER_PARAMETER`, `PASSES`,
    `CORPUS_TOKENS_PER_PARAMETER` by default; None: that way is closed) are
    what `bench/model_sizes.py` fits."""
    least_tokens, least_passes, least_corpus = thresholds or (
        TOKENS_PER_PARAMETER, PASSES, CORPUS_TOKENS_PER_PARAMETER)
    by_tokens = least_tokens is not None and tokens_per_parameter >= least_tokens
    by_passes = least_passes is not None and least_corpus is not None and \
        passes >= least_passes and corpus_tokens_per_parameter >= least_corpus
    return by_tokens or by_passes


def climb(measure: Callable[[str], float], budget_seconds: float, base: TransformerConfig,
          vocab_size: int, mean_tokens: float, batch_tokens: int, corpus_tokens: int,
          max_steps: int | None = None) -> tuple[str, dict[str, float], dict[str, dict]]:
    """The largest size of the ladder the budget can feed, measuring no more
    sizes than that takes; the step seconds measured; every size's row
    (`candidate_row`, `"measured"` false for an estimate through the measured
    sizes, `Speed.through`). A run stops after `max_steps` updates (its epochs'),
    however much of the budget is left: no size plans more.

    `measure(preset)` is the mean step seconds of a size at the run's batches.
    The smallest size is chosen when the next one cannot be fed, so the climb
    starts there; each size after it is measured only if the budget could feed
    it at the speed measured for the size below it (an upper bound: a dearer
    size is never faster).
    """
    def cost(preset):
        return token_cost(candidate_model(preset, base), vocab_size, mean_tokens)

    max_tokens = None if max_steps is None else max_steps * batch_tokens

    def run_rate(step_seconds):
        return RUN_SPEED_SHARE * batch_tokens / step_seconds

    def row(preset, tokens_per_second):
        return candidate_row(candidate_model(preset, base), tokens_per_second,
                             budget_seconds, corpus_tokens, max_tokens)

    chosen, seconds, bound = SIZE_LADDER[0], {}, None
    for preset in SIZE_LADDER[1:]:
        if bound is not None and not row(preset, bound)["fed"]:
            break
        seconds[preset] = measure(preset)
        if not row(preset, run_rate(seconds[preset]))["fed"]:
            break
        chosen, bound = preset, run_rate(seconds[preset])
    speed = Speed.through([(cost(p), seconds[p]) for p in seconds], batch_tokens)
    rows = {}
    for preset in SIZE_LADDER:
        rate = run_rate(seconds[preset]) if preset in seconds else \
            RUN_SPEED_SHARE * speed.tokens_per_second(cost(preset), batch_tokens)
        rows[preset] = {**row(preset, rate), "measured": preset in seconds}
    return chosen, seconds, rows


def explain(chosen: str, rows: dict[str, dict]) -> str:
    """Why `chosen`, in words, for the log's line."""
    def figures(row):
        return (f"{row['tokens_per_parameter']:.2f} per body parameter, {row['passes']:.2f} "
                f"passes over a corpus of {row['corpus_tokens_per_parameter']:.3f} tokens per "
                "body parameter")

    row = rows[chosen]
    why = (f"{row['planned_tokens']:,} planned tokens at {row['tokens_per_second']:,.0f} a "
           f"second, {row['effective_tokens']:,} counting repeated passes: {figures(row)} "
           f"(the rule asks at least {TOKENS_PER_PARAMETER} per body parameter, or "
           f"{PASSES:g} passes over a corpus of at least {CORPUS_TOKENS_PER_PARAMETER:g})")
    larger = SIZE_LADDER.index(chosen) + 1
    if larger < len(SIZE_LADDER):
        bigger = rows[SIZE_LADDER[larger]]
        estimated = "" if bigger["measured"] else ", estimated"
        why += f"; {SIZE_LADDER[larger]} would get {figures(bigger)}{estimated}"
    return why


def unmeasured(config, calibrates: bool) -> str | None:
    """Why a run of preset "auto" trains `REFERENCE_PRESET` without measuring
    (None: it measures): no time budget, a multi-worker run, or no measurement
    offered (`calibrates` false)."""
    if config.time_budget is None:
        return "no --time-budget: the run is sized by its epochs"
    if config.strategy == "multi-worker":
        return "a multi-worker run: each worker would measure its own speed"
    return None if calibrates else "no speed measured"


def reference_choice(because: str) -> tuple[str, dict[str, Any]]:
    """`REFERENCE_PRESET` and its record, `because` (`unmeasured`'s reason)."""
    return REFERENCE_PRESET, {"preset": REFERENCE_PRESET,
                              "reason": f"{REFERENCE_PRESET} ({because})"}


def size_rule(config, measure: Callable[[str], float], vocab_size: int, mean_tokens: float,
              corpus_tokens: int) -> tuple[str, dict[str, Any]]:
    """The preset a run of preset "auto" with a time budget trains, and the
    record of the choice for `config.json` (its `reason` is the log's line).

    Args:
        config: the run's `RunConfig`, its batches, epochs and precision
            resolved (its epochs' steps bound every size's tokens).
        measure: `measure(preset)`, the mean seconds of a training step of that
            size at the run's batches and precision on this machine
            (`transformer.run.calibration.measure_step`); called only for the
            sizes the choice needs (`climb`).
        vocab_size: the target vocabulary's size.
        mean_tokens: the mean padded length of a training pair.
        corpus_tokens: the training pairs times their mean padded length.
    """
    batch_tokens = config.batch_tokens or round(config.batch_size * mean_tokens)
    max_steps = config.epochs * config.steps_per_epoch \
        if config.epochs and config.steps_per_epoch else None
    chosen, seconds, rows = climb(measure, config.time_budget, config.model, vocab_size,
                                  mean_tokens, batch_tokens, corpus_tokens, max_steps)
    sizes = PRESETS[chosen]
    reason = (f"{chosen} ({sizes.num_layers} layers, d_model {sizes.d_model}, dff "
              f"{sizes.dff}) for {config.time_budget / 60:.3g} min: {explain(chosen, rows)}")
    record = {"preset": chosen, "reason": reason,
              "step_seconds": {preset: round(value, 5) for preset, value in seconds.items()},
              "batch_tokens": batch_tokens, "max_steps": max_steps, "candidates": rows,
              "tokens_per_parameter": TOKENS_PER_PARAMETER, "min_passes": PASSES,
              "run_speed_share": RUN_SPEED_SHARE,
              "min_corpus_tokens_per_parameter": CORPUS_TOKENS_PER_PARAMETER,
              "repeat_decay": REPEAT_DECAY,
              "corpus_tokens": int(corpus_tokens)}
    return chosen, record
