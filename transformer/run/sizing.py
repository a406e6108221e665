"""The time budget chooses the model: the size rule and the speed calibration it reads.

A real corpus's run with a `--time-budget` and no model option (the recipe's
preset `"auto"`) trains the largest size of `SIZE_LADDER` that the budget can
feed: one whose effective tokens are at least `TOKENS_PER_PARAMETER` times
its body parameters (those of its layers, without the embeddings). Its
planned tokens are the updates this machine makes of that size in the
budget, measured, times the token budget of a batch (`batch_tokens`); the
effective ones count repeated passes over the corpus (its pairs times their
mean padded length) at a value that decays as Muennighoff et al. (2023,
"Scaling Data-Constrained Language Models") fitted (`effective_tokens`), so
a small corpus holds a smaller model than a large one in the same time.
Longer budgets and faster machines (a GPU, more cores) thus get larger
models, and the choice never shrinks as the budget grows. The form is that
of compute-optimal sizing (Hoffmann et al., 2022: parameters grow with the
tokens a run can train on); the threshold is fitted to BLEU against minutes
for each size on the development corpora (BENCHMARKS.md, "The budget chooses
the model").

The machine's speed is measured at the start of the run
(`transformer.run.calibration.calibrate`): a few
training steps of two sizes at the run's batch shape and precision give a
step's fixed cost and its cost per multiply-add (`Speed`), from which every
size's tokens a second follow (`token_cost`). The choice, the calibration and
every candidate's figures are recorded in `config.json` (`size_rule`), so a
resume keeps the model; the log says what was chosen and why in one line.

Without a time budget the run is sized by its epochs and trains the
`REFERENCE_PRESET`; a multi-worker run does too, since its workers would each
measure their own speed. Any model option or `--preset` overrides the rule.
Plain Python (no TensorFlow at import); the measurement itself is
`transformer.run.calibration`.
"""

from __future__ import annotations

import dataclasses
import math
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
# bench/results/model_sizes_zen4.json, where no larger size beat the next
# smaller one up to 1.28 (BENCHMARKS.md, "The budget chooses the model").
TOKENS_PER_PARAMETER = 1.3
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

    def tokens_per_second(self, cost: float, batch_tokens: int) -> float:
        """Tokens a second in steps of `batch_tokens` tokens."""
        return batch_tokens / (self.step_seconds + self.seconds_per_cost * cost * batch_tokens)

    @classmethod
    def from_two(cls, points: list[tuple[float, float]], batch_tokens: int) -> Speed:
        """The speed through two measured (token cost, step seconds) points; a line
        through the origin through the first when the two disagree with a fixed
        cost (a fixed cost below zero, or a second step not dearer)."""
        (cost_a, seconds_a), (cost_b, seconds_b) = points
        slope = (seconds_b - seconds_a) / ((cost_b - cost_a) * batch_tokens)
        fixed = seconds_a - slope * cost_a * batch_tokens
        if slope <= 0 or fixed < 0:
            return cls(0.0, seconds_a / (cost_a * batch_tokens))
        return cls(fixed, slope)


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


def plan(speed: Speed, budget_seconds: float, base: TransformerConfig, vocab_size: int,
         mean_tokens: float, batch_tokens: int, corpus_tokens: int) -> dict[str, dict]:
    """Every size of the ladder's estimated tokens a second, planned and
    effective tokens in the budget, body parameters and their ratio."""
    rows = {}
    for preset in SIZE_LADDER:
        model = candidate_model(preset, base)
        rate = speed.tokens_per_second(token_cost(model, vocab_size, mean_tokens), batch_tokens)
        params = body_parameters(model)
        effective = effective_tokens(rate * budget_seconds, corpus_tokens)
        rows[preset] = {"tokens_per_second": round(rate, 1),
                        "planned_tokens": round(rate * budget_seconds),
                        "effective_tokens": round(effective),
                        "body_parameters": params,
                        "tokens_per_parameter": round(effective / params, 3)}
    return rows


def choose(rows: dict[str, dict]) -> tuple[str, str]:
    """The largest size the budget can feed, and why (the smallest when none can)."""
    fed = [p for p in SIZE_LADDER if rows[p]["tokens_per_parameter"] >= TOKENS_PER_PARAMETER]
    chosen = fed[-1] if fed else SIZE_LADDER[0]
    row = rows[chosen]
    why = (f"{row['planned_tokens']:,} batch tokens at {row['tokens_per_second']:,.0f} a "
           f"second, {row['effective_tokens']:,} counting repeated passes, "
           f"{row['tokens_per_parameter']:.2f} per body parameter (the rule asks "
           f"{TOKENS_PER_PARAMETER})")
    larger = SIZE_LADDER.index(chosen) + 1
    if larger < len(SIZE_LADDER):
        bigger = SIZE_LADDER[larger]
        why += f"; {bigger} would get {rows[bigger]['tokens_per_parameter']:.2f}"
    return chosen, why


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


def size_rule(config, speed: Speed, vocab_size: int, mean_tokens: float,
              corpus_tokens: int) -> tuple[str, dict[str, Any]]:
    """The preset a run of preset "auto" with a time budget trains, and the
    record of the choice for `config.json` (its `reason` is the log's line).

    Args:
        config: the run's `RunConfig`, its batches and precision resolved.
        speed: this machine's `Speed` (`transformer.run.calibration.calibrate`).
        vocab_size: the target vocabulary's size.
        mean_tokens: the mean padded length of a training pair.
        corpus_tokens: the training pairs times their mean padded length.
    """
    rows = plan(speed, config.time_budget, config.model, vocab_size, mean_tokens,
                config.batch_tokens or round(config.batch_size * mean_tokens), corpus_tokens)
    chosen, why = choose(rows)
    sizes = PRESETS[chosen]
    reason = (f"{chosen} ({sizes.num_layers} layers, d_model {sizes.d_model}, dff "
              f"{sizes.dff}) for {config.time_budget / 60:.3g} min: {why}")
    record = {"preset": chosen, "reason": reason,
              "calibration": dataclasses.asdict(speed), "candidates": rows,
              "tokens_per_parameter": TOKENS_PER_PARAMETER,
              "repeat_decay": REPEAT_DECAY,
              "corpus_tokens": int(corpus_tokens)}
    return chosen, record
