"""Translate sentences with a trained run (written by train.py), from the command line.

    python translate.py --run runs/toy "o gato preto come o bolo"
    python translate.py --run runs/toy "o gato" "os meninos não dormem" --beam 4
    cat sentences.txt | python translate.py --run runs/toy --show-tokens
    python translate.py --run runs/toy "o gato preto" --plot attention.png --layer 1

Sentences come from the arguments or, without any, from standard input (one
per line); either way they are translated as one batch. Translations go to
standard output, one per line, in order. TensorFlow is imported only once the
options are read (after its native start-up messages are hidden, unless --verbose).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from transformer.cli.common import (
    OneLineErrorParser,
    hide_native_stderr,
    non_negative_float,
    positive_int,
    report_error,
)
from transformer.plot import plot_attention_weights  # matplotlib only, no TensorFlow

PROG = "translate.py"


def parse_args(argv=None):
    parser = OneLineErrorParser(
        prog=PROG,
        description="Translate sentences with a trained run directory (see train.py).",
    )
    parser.add_argument("sentences", nargs="*",
                        help="sentences to translate; read from standard input, one per "
                             "line, when none are given")
    parser.add_argument("--run", required=True, metavar="DIR",
                        help="the run directory written by train.py (e.g. runs/toy)")
    parser.add_argument("--beam", type=positive_int, default=1, metavar="N",
                        help="beam size; 1 (the default) is greedy decoding, the paper "
                             "uses 4")
    parser.add_argument("--alpha", type=non_negative_float, default=None,
                        help="length penalty exponent of beam search (default 0.6)")
    parser.add_argument("--max-length", type=positive_int, default=None, metavar="N",
                        help="the most output tokens per sentence (default 128, at most "
                             "the model's max_length)")
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="save the attention heads of the chosen layer (encoder-decoder "
                             "attention of the last layer by default); with several "
                             "sentences, FILE_1.png, FILE_2.png, ...")
    parser.add_argument("--layer", default=None, metavar="N|NAME",
                        help="the decoder layer to plot (1 = first; default: last), or a "
                             "weights name such as encoder_layer1 or decoder_layer2_block1")
    parser.add_argument("--show-tokens", action="store_true",
                        help="also print the source and output subword tokens")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's own start-up and device messages on "
                             "standard error (hidden by default)")
    args = parser.parse_args(argv)
    if args.layer is not None and args.plot is None:
        parser.error("--layer chooses what --plot draws; add --plot FILE.png")
    return args


def _layer_name(layer, num_layers):
    """`--layer` -> a key of the attention-weights dict."""
    if layer is None:
        return f"decoder_layer{num_layers}_block2"
    if layer.isdigit():
        index = int(layer)
        if not 1 <= index <= num_layers:
            raise ValueError(
                f"--layer {layer}: the model has decoder layers 1 to {num_layers}."
            )
        return f"decoder_layer{index}_block2"
    return layer


def _plot_paths(plot, count):
    path = Path(plot)
    if count == 1:
        return [path]
    return [path.with_name(f"{path.stem}_{i + 1}{path.suffix}") for i in range(count)]


def _axes_tokens(result, name):
    """(keys, queries) of the weights `name`, as the model saw them."""
    if name.startswith("encoder"):
        return result.input_tokens, result.input_tokens
    if name.endswith("block1"):
        return result.tokens[:-1], result.tokens[1:]
    return result.input_tokens, result.tokens[1:]


def _read_sentences(args):
    if args.sentences:
        return args.sentences
    if sys.stdin.isatty():
        raise ValueError(
            "no sentences given: pass them as arguments or on standard input, one per line."
        )
    return [line.rstrip("\r\n") for line in sys.stdin]


def run(args):
    sentences = _read_sentences(args)
    if args.plot is not None and Path(args.plot).suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ValueError(f"--plot {args.plot}: expected a .png, .pdf or .svg file name.")
    if not sentences:
        return 0

    from transformer.translate import Translator

    translator = Translator.from_run(args.run)
    num_layers = translator.transformer.num_layers
    layer_name = None
    if args.plot is not None:
        layer_name = _layer_name(args.layer, num_layers)
        valid = {f"encoder_layer{i}" for i in range(1, num_layers + 1)}
        valid |= {f"decoder_layer{i}_block{b}" for i in range(1, num_layers + 1) for b in (1, 2)}
        if layer_name not in valid:
            raise ValueError(
                f"--layer {args.layer}: expected a decoder layer number 1 to {num_layers} "
                "or one of encoder_layer{i}, decoder_layer{i}_block1, decoder_layer{i}_block2."
            )

    results = translator(
        list(sentences), max_length=args.max_length, beam_size=args.beam, alpha=args.alpha,
        return_attention=args.plot is not None,
    )
    for result in results:
        print(result.text)
        if args.show_tokens:
            print("  source tokens:", " ".join(result.input_tokens))
            print("  output tokens:", " ".join(result.tokens))
    sys.stdout.flush()

    if args.plot is not None:
        for result, path in zip(results, _plot_paths(args.plot, len(results)), strict=True):
            if not result.tokens:
                logging.warning("Not plotting %s: the sentence is empty.", path)
                continue
            keys, queries = _axes_tokens(result, layer_name)
            figure = plot_attention_weights(
                keys, queries, result.attention_weights[layer_name], layer_name=layer_name
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(path, dpi=100, bbox_inches="tight")
            print(f"saved {path} ({layer_name})", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    """Runs `translate.py` with `argv` (default: the command line's); returns the exit status."""
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not args.verbose:
        hide_native_stderr()  # for the whole run: TensorFlow is imported lazily
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - one line for people, no traceback
        return report_error(PROG, err)


if __name__ == "__main__":
    sys.exit(main())
