"""The three JoeyNMT 2.3 set-ups of the peer benchmark, as configuration dicts.

- `recipe`: JoeyNMT's shipped small Transformer for IWSLT14 de-en
  (`configs/iwslt14_deen_bpe.yaml` of JoeyNMT 2.3): 6+6 pre-norm layers 256
  wide, 4 heads, ff 1024, dropout 0.3, tied embeddings and softmax, AdamW
  (0.9, 0.999) at 3e-4 with plateau decay (factor 0.7, patience 5), label
  smoothing 0.1, batches of 4096 tokens, validation BLEU on the whole dev set
  every 1000 updates.
- `recipe_arch`: the same recipe at this project's real-text architecture
  (passed in: 4+4 layers, d_model 128, 8 heads, ff 512, pre-norm, tied).
- `cpu`: what a careful JoeyNMT user would run on one CPU core at that
  architecture for a budget of minutes, with the choices this project
  measured for such short runs (docs/design.md and BENCHMARKS.md, "Real
  text"): token batches of about 32 pairs (JoeyNMT fills a batch in random
  order up to `batch_size` tokens of padded length, so 768 tokens hold about
  32 pairs of this corpus), Adam (0.9, 0.98), a linear warm-up to the peak
  rate of the paper's schedule at d_model 128, `(128 * 4000)^-0.5`, in a
  warm-up fitted to the budget and then the paper's inverse-square-root decay
  (JoeyNMT's `noam`, section 5.3 of Vaswani et al., 2017), no dropout and no
  label smoothing, greedy validation BLEU on a few hundred fixed pairs often
  enough to keep the best checkpoint, outputs capped at 1.5 times the
  longest source of their batch (JoeyNMT's default), the paper's length
  penalty 0.6 in beam search (section 6.1) as the project uses.

Everything the three share with the project's runs is the same on purpose:
one SentencePiece unigram vocabulary of 8000 pieces for both languages learnt
by the project's own code (cased; the recipe's lower-casing and 32k subword-nmt
merges would not tie to this project's count), beam 4 on the test split, and
sacrebleu 13a lower-cased scoring of the detokenised output against the raw
references. Pure Python: the driver (`run.py`) writes these as YAML.
"""

from __future__ import annotations

import copy

SETUPS = ("recipe", "recipe_arch", "cpu")

# JoeyNMT's own ids: its Vocabulary puts unk, pad, bos, eos first, in this
# order; the surface forms are the project's SentencePiece pieces.
SPECIAL_SYMBOLS = {
    "unk_token": "[UNK]", "unk_id": 0, "pad_token": "[PAD]", "pad_id": 1,
    "bos_token": "[START]", "bos_id": 2, "eos_token": "[END]", "eos_id": 3,
}
BEAM_SIZE = 4
# The peak of the paper's schedule at d_model 128 with 4000 warm-up steps,
# the rate this project's runs shorter than their warm-up rise to.
PROJECT_PEAK_RATE = (128 * 4000) ** -0.5


def _side(lang: str, model_file: str, vocab_file: str, max_length: int) -> dict:
    return {
        "lang": lang, "max_length": max_length, "min_length": 1, "lowercase": False,
        "normalize": False, "level": "bpe", "voc_min_freq": 1, "voc_file": vocab_file,
        "tokenizer_type": "sentencepiece",
        "tokenizer_cfg": {"model_file": model_file, "pretokenizer": "none"},
    }


def _stack(layers: int, width: int, heads: int, ff: int, dropout: float, norm: str) -> dict:
    return {
        "type": "transformer", "num_layers": layers, "num_heads": heads,
        "embeddings": {"embedding_dim": width, "scale": True, "dropout": 0.0},
        "hidden_size": width, "ff_size": ff, "dropout": dropout, "layer_norm": norm,
        "activation": "relu",
    }


def recipe(data: dict, model_dir: str, seed: int = 42) -> dict:
    """JoeyNMT 2.3's IWSLT14 small Transformer on this corpus.

    Args:
        data: `train`, `dev`, `test` path prefixes (JoeyNMT's plain format:
            `PREFIX.es`, `PREFIX.en`), `model_file` (SentencePiece) and
            `vocab_file` (one piece a line).
        model_dir: where JoeyNMT writes checkpoints and logs.
        seed: JoeyNMT's `random_seed`.
    """
    return {
        "name": "recipe", "joeynmt_version": "2.3.0", "model_dir": model_dir,
        "use_cuda": False, "fp16": False, "random_seed": seed,
        "data": {
            "train": data["train"], "dev": data["dev"], "test": data["test"],
            "dataset_type": "plain",
            "src": _side("es", data["model_file"], data["vocab_file"], 62),
            "trg": _side("en", data["model_file"], data["vocab_file"], 62),
            "special_symbols": dict(SPECIAL_SYMBOLS),
        },
        "testing": {
            "n_best": 1, "beam_size": BEAM_SIZE, "beam_alpha": 1.0, "batch_size": 1024,
            "batch_type": "token", "max_output_length": 100, "eval_metrics": ["bleu"],
            "sacrebleu_cfg": {"tokenize": "13a", "lowercase": True},
        },
        "training": {
            "optimizer": "adamw", "normalization": "tokens", "adam_betas": [0.9, 0.999],
            "scheduling": "plateau", "patience": 5, "decrease_factor": 0.7,
            "loss": "crossentropy", "learning_rate": 3.0e-4, "learning_rate_min": 1.0e-8,
            "weight_decay": 0.0, "label_smoothing": 0.1, "batch_size": 4096,
            "batch_type": "token", "early_stopping_metric": "bleu", "epochs": 100,
            "validation_freq": 1000, "logging_freq": 100, "overwrite": True, "shuffle": True,
            "print_valid_sents": [0, 1, 2], "keep_best_ckpts": 1, "num_workers": 0,
        },
        "model": {
            "initializer": "xavier_uniform", "embed_initializer": "xavier_uniform",
            "embed_init_gain": 1.0, "init_gain": 1.0, "bias_initializer": "zeros",
            "tied_embeddings": True, "tied_softmax": True,
            "encoder": _stack(6, 256, 4, 1024, 0.3, "pre"),
            "decoder": _stack(6, 256, 4, 1024, 0.3, "pre"),
        },
    }


def recipe_arch(data: dict, model_dir: str, architecture: dict, seed: int = 42) -> dict:
    """The recipe with the model at `architecture`: `num_layers`, `d_model`,
    `num_heads`, `dff`, `normalize_first`, `tie_embeddings` (this project's
    `TransformerConfig` fields); training settings unchanged."""
    config = recipe(data, model_dir, seed)
    config["name"] = "recipe_arch"
    if not architecture["tie_embeddings"]:
        raise ValueError("The peer benchmark ties embeddings as the project's real-text model does; "
                         f"received tie_embeddings={architecture['tie_embeddings']!r}.")
    norm = "pre" if architecture["normalize_first"] else "post"
    for stack in ("encoder", "decoder"):
        dropout = config["model"][stack]["dropout"]
        config["model"][stack] = _stack(
            architecture["num_layers"], architecture["d_model"], architecture["num_heads"],
            architecture["dff"], dropout, norm)
    return config


def cpu(data: dict, model_dir: str, architecture: dict, *, warmup: int = 1000,
        validation_freq: int = 500, batch_tokens: int = 768, seed: int = 42) -> dict:
    """The careful CPU set-up at `architecture` (see the module docstring).

    Args:
        data: as for `recipe`; `dev` should be a few hundred pairs.
        model_dir: where JoeyNMT writes.
        architecture: as for `recipe_arch`.
        warmup: updates of linear warm-up to `PROJECT_PEAK_RATE`.
        validation_freq: updates between validations.
        batch_tokens: JoeyNMT's token batch size (padded length times pairs).
        seed: JoeyNMT's `random_seed`.
    """
    if validation_freq < 2 or warmup < 1 or batch_tokens < 1:
        raise ValueError("The cpu set-up needs validation_freq >= 2, warmup >= 1 and "
                         f"batch_tokens >= 1; received validation_freq={validation_freq}, "
                         f"warmup={warmup}, batch_tokens={batch_tokens}.")
    config = recipe_arch(data, model_dir, architecture, seed)
    config["name"] = "cpu"
    for side in ("src", "trg"):
        config["data"][side]["max_length"] = 128
    for stack in ("encoder", "decoder"):
        config["model"][stack]["dropout"] = 0.0
    config["testing"]["beam_alpha"] = 0.6
    # JoeyNMT's default cap, 1.5 times the batch's longest source, instead of
    # the recipe's 100 tokens: its decoders recompute the whole prefix at
    # each step, and a half-trained model that does not stop yet took about
    # 5 minutes of a 10-minute budget to validate 300 pairs with 100.
    config["testing"]["max_output_length"] = -1
    width = architecture["d_model"]
    config["training"].update({
        "optimizer": "adam", "adam_betas": [0.9, 0.98], "label_smoothing": 0.0,
        # The paper's schedule (JoeyNMT's "noam"), its factor set so that the
        # peak at `warmup` is PROJECT_PEAK_RATE. JoeyNMT steps the scheduler
        # after each update, so the first one runs at `learning_rate`: set to
        # the schedule's first rate. A lower `learning_rate_min` than any rate
        # of the run: JoeyNMT stops training when the rate falls below it.
        "scheduling": "noam", "learning_rate_warmup": warmup,
        "learning_rate_factor": noam_factor(width, warmup),
        "learning_rate": PROJECT_PEAK_RATE / warmup, "learning_rate_min": 1.0e-8,
        "batch_size": batch_tokens, "validation_freq": validation_freq,
        "logging_freq": _logging_freq(validation_freq),
    })
    for key in ("patience", "decrease_factor"):
        del config["training"][key]
    return config


def noam_factor(d_model: int, warmup: int) -> float:
    """The factor of JoeyNMT's noam schedule, `factor * d_model^-0.5 *
    min(step^-0.5, step * warmup^-1.5)`, that peaks at PROJECT_PEAK_RATE.

    >>> round(noam_factor(128, 4000), 6)
    1.0
    """
    return PROJECT_PEAK_RATE * (d_model * warmup) ** 0.5


def _logging_freq(validation_freq: int) -> int:
    """At most 50, smaller than `validation_freq` and dividing it (JoeyNMT's rules)."""
    return max(f for f in range(1, min(50, validation_freq - 1) + 1) if validation_freq % f == 0)


def for_test(config: dict, checkpoint: str) -> dict:
    """The config for decoding the test split only, from `checkpoint`."""
    config = copy.deepcopy(config)
    del config["data"]["train"], config["data"]["dev"]
    config["testing"]["load_model"] = checkpoint
    return config


def parameter_count(config: dict, vocab_size: int) -> int:
    """Parameters of the JoeyNMT Transformer `config` describes, one vocabulary
    of `vocab_size` tied to both embeddings and the output layer (no bias).

    Per layer: attention `4 (d^2 + d)` (query, key, value and output
    projections with biases), feed-forward `2 d f + d + f`, a layer norm `2 d`
    before each sublayer, and one closing each stack when pre-norm.

    >>> arch = {"num_layers": 4, "d_model": 128, "num_heads": 8, "dff": 512,
    ...         "normalize_first": True, "tie_embeddings": True}
    >>> data = dict.fromkeys(("train", "dev", "test", "model_file", "vocab_file"), "x")
    >>> parameter_count(recipe_arch(data, "m", arch), 8000)
    2875904
    """
    if not (config["model"]["tied_embeddings"] and config["model"]["tied_softmax"]):
        raise ValueError("parameter_count counts tied embeddings and softmax only.")
    total = 0
    for stack, attentions in (("encoder", 1), ("decoder", 2)):
        part = config["model"][stack]
        d, f, layers = part["hidden_size"], part["ff_size"], part["num_layers"]
        layer = attentions * 4 * (d * d + d) + 2 * d * f + d + f + (attentions + 1) * 2 * d
        total += layers * layer + (2 * d if part["layer_norm"] == "pre" else 0)
    return total + vocab_size * config["model"]["decoder"]["hidden_size"]
