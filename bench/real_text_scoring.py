"""Scoring helpers shared by the real-text benchmarks (`bench/tutorial_recipe.py`,
`bench/real_text_eval.py`).

Two ways to compute BLEU on a test TSV, both with sacrebleu's 13a tokenizer:

- the tutorial's: the detokenized WordPiece output ("the boy ' s book",
  lower-cased, accents stripped, punctuation split) against the raw references,
  once with sacrebleu's `lowercase=True` and once cased;
- `train.py`'s (`transformer.training.evaluate`): both sides passed through
  `transformer.training.normalize_text` (lower-cased, accents stripped, every
  punctuation mark a word).

And a decoding-length report: how many outputs ran to the cap without
`[END]`, and what BLEU would be had decoding stopped at `input length + 50`
tokens (section 6.1 of Vaswani et al., 2017), which for greedy decoding is the
same as cutting the output there.

And `variant_rounds`, the loop of the step benchmarks (`bench/step_kernels.py`,
`bench/real_text_step.py`): each variant in its own worker process, the
variants alternating over rounds.

Not part of the library.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np


def bleu_all_ways(hypotheses, references):
    """BLEU of raw detokenized hypotheses vs raw references, three ways, with signatures."""
    import sacrebleu

    from transformer.run.evaluation import normalize_text

    out = {}
    for name, lowercase in (("bleu_lc_13a", True), ("bleu_cased_13a", False)):
        metric = sacrebleu.BLEU(lowercase=lowercase, tokenize="13a")
        score = metric.corpus_score(list(hypotheses), [list(references)])
        out[name] = round(float(score.score), 2)
        out[name + "_signature"] = str(metric.get_signature())
    metric = sacrebleu.BLEU()
    hyps = [normalize_text(h) for h in hypotheses]
    refs = [normalize_text(r) for r in references]
    score = metric.corpus_score(hyps, [refs])
    out["bleu_train_py"] = round(float(score.score), 2)
    out["bleu_train_py_signature"] = str(metric.get_signature()) + " (normalize_text both sides)"
    out["exact_match_train_py"] = round(
        sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(refs), 4)
    out["hyp_ref_length_ratio_lc_13a"] = round(
        float(sacrebleu.BLEU(lowercase=True).corpus_score(
            list(hypotheses), [list(references)]).sys_len)
        / max(1, sacrebleu.BLEU(lowercase=True).corpus_score(
            list(hypotheses), [list(references)]).ref_len), 3)
    return out


def length_report(output_lengths, input_lengths, cap):
    """Output-length statistics. `output_lengths` count generated tokens, [END] included
    when produced; an output "hit the cap" when it has `cap` tokens and no [END]."""
    out_len = np.asarray(output_lengths)
    in_len = np.asarray(input_lengths)
    return {
        "cap": int(cap),
        "outputs": int(out_len.size),
        "hit_cap": int(np.count_nonzero(out_len >= cap)),
        "hit_cap_share": round(float(np.mean(out_len >= cap)), 4),
        "mean_output_tokens": round(float(out_len.mean()), 2),
        "median_output_tokens": float(np.median(out_len)),
        "mean_input_tokens": round(float(in_len.mean()), 2),
        "max_input_tokens": int(in_len.max()),
    }


def machine():
    """CPU model, family and model numbers, core count, the flags that pick the
    precision, the precision `train.py` picks here, and the load averages (1, 5,
    15 min). The flags are read by `transformer.run.precision`, the one reader."""
    from transformer.run.precision import cpu_flags, default_precision

    model = platform.processor() or ""
    numbers = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not numbers.get("model name"):
                    numbers["model name"] = value.strip()
                elif key in ("cpu family", "model") and key not in numbers:
                    numbers[key] = value.strip()
                if len(numbers) == 3:
                    break
    except OSError:
        pass
    model = numbers.get("model name", model)
    flags = cpu_flags()
    return {
        "cpu_model": model,
        "cpu_family": numbers.get("cpu family"),
        "cpu_model_number": numbers.get("model"),
        "cpu_count": os.cpu_count(),
        "amx_bf16": "amx_bf16" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_bf16": "avx512_bf16" in flags,
        "train_py_precision": default_precision(flags),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def variant_rounds(script, arguments, variants, rounds, environment) -> dict[str, list[dict]]:
    """Runs `script --variant V` with `arguments` for each of `variants`, in
    `rounds` rounds (so that paired variants share the minutes of a shared
    machine), each run in its own process with `environment(V)` as its
    environment; returns each variant's results, the JSON object each worker
    prints on its last line of output.

    Raises:
        SystemExit: a worker failed (the end of its error output is printed).
    """
    runs = {variant: [] for variant in variants}
    for round_index in range(rounds):
        for variant in variants:
            command = [sys.executable, str(script), *arguments, "--variant", variant]
            out = subprocess.run(command, capture_output=True, text=True, env=environment(variant))
            if out.returncode:
                print(out.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{script}: variant {variant!r} failed (exit {out.returncode})")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            runs[variant].append(result)
            print(f"round {round_index + 1} {variant}: {result}", flush=True)
    return runs
