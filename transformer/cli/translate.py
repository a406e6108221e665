"""The `translate.py` command line (options, files, printing) over the library's
`transformer.decoding.translator`.

The script `translate.py` only calls `main` here; the Python API it uses is
`transformer.decoding.translator.Translator`. The search options become one strategy
object in `search_strategy`.

    python translate.py --run runs/toy "o gato preto come o bolo"
    python translate.py --run runs/toy "o gato" "os meninos não dormem" --beam 4
    cat sentences.txt | python translate.py --run runs/toy --show-tokens
    python translate.py --run runs/toy "o gato preto" --plot attention.png --layer 1
    python translate.py --run runs/toy "o gato preto come o bolo" --html explorer.html
    python translate.py --run runs/toy "o gato preto" --n-best 3
    python translate.py --run runs/toy "o gato preto" --top-p 0.9 --seed 1
    python translate.py --run runs/toy "o gato preto" --search beam --setting size=6
    python translate.py --run runs/toy "o gato preto" --engine ctranslate2 --quantization int8

With `--engine ctranslate2` the run is converted once to a CTranslate2 model
directory inside it (`RUN/ctranslate2-float32/`, or `-int8`; converted again
when its model.keras changes, see `transformer.cli.export`) and translated by
CTranslate2 (`transformer.decoding.ctranslate2_translator`), with the same search
options and scores, except that for a run with one vocabulary the scores
are renormalized over the target language's pieces (the export's vocabulary
map, see `transformer.decoding.ctranslate2_translator`); TensorFlow starts only to
convert. The attention plots need the TensorFlow engine.

Sentences come from the arguments or, without any, from standard input (one
per line, UTF-8); either way they are sorted by length and translated in
batches of `transformer.constants.TRANSLATE_BATCH_SIZE` (CTranslate2:
`transformer.decoding.ctranslate2_translator.CTRANSLATE2_BATCH_SIZE`). Translations go to
standard output, one per line, in the input's order (with --scores, each
followed by a tab and its score; for a strategy that returns N results per
sentence, such as --n-best N, N such lines per sentence, best first). A byte-order mark at the start of standard input is dropped. A
line of standard input that is not valid UTF-8 is reported on standard error,
one line per bad line (`<stdin>:3: not valid UTF-8 (byte 0xff at column 8)`),
and nothing is translated: the exit status is 1. TensorFlow is imported only
once the options are read and checked (after its native start-up messages are
hidden, unless --verbose), so `--help` and usage errors are quick.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
from pathlib import Path

from transformer.cli.common import (
    OneLineErrorParser,
    add_strategy_module_argument,
    hide_native_stderr,
    import_strategy_modules,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
    report_error,
)
from transformer.constants import DEFAULT_MAX_OUTPUT_LENGTH
from transformer.decoding.ctranslate2_translator import (  # no TensorFlow, no ctranslate2 at import
    CLI_QUANTIZATIONS,
    CTranslate2Translator,
)
from transformer.decoding.engines import (  # no TensorFlow until an engine loads
    ctranslate2_model,
    tensorflow_translator,
)
from transformer.decoding.search_options import SearchOptions  # no TensorFlow
from transformer.decoding.search_options import search_strategy as options_strategy
from transformer.decoding.strategies import registered  # no TensorFlow
from transformer.plot import (  # matplotlib only, no TensorFlow
    attention_axes,
    attention_explorer_html,
    plot_attention_weights,
)

_SCORE_HELP = ("the score is the log-probability the search ranks by: log P(Y|X) for "
               "greedy decoding and sampling, and log P(Y|X) / lp(Y) with the length "
               "penalty lp(Y) = ((5 + |Y|) / 6) ** alpha for beam search")

PROG = "translate.py"
ENGINES = ("tensorflow", "ctranslate2")


def parse_args(argv=None):
    parser = OneLineErrorParser(
        prog=PROG,
        description="Translate sentences with a trained run directory (see train.py).",
        epilog="Standard input is read as UTF-8. If any line is not valid UTF-8, each bad "
               "line is reported on standard error as '<stdin>:LINE: not valid UTF-8 (byte "
               "0xNN at column N)' (columns count bytes from 1), nothing is translated, and "
               "the exit status is 1.",
    )
    parser.add_argument("sentences", nargs="*",
                        help="sentences to translate; read from standard input, one per "
                             "line (UTF-8), when none are given")
    parser.add_argument("--run", required=True, metavar="DIR",
                        help="the run directory written by train.py (e.g. runs/toy)")
    parser.add_argument("--max-length", type=positive_int, default=None, metavar="N",
                        help="the most output tokens per sentence (default 128, at most "
                             "the model's max_length)")
    _add_search_arguments(parser)
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="save the attention heads of the chosen layer (encoder-decoder "
                             "attention of the last layer by default); with several "
                             "sentences, FILE_1.png, FILE_2.png, ...")
    parser.add_argument("--layer", default=None, metavar="N|NAME",
                        help="the decoder layer to plot (1 = first; default: last), or a "
                             "weights name such as encoder_layer1 or decoder_layer2_block1")
    parser.add_argument("--html", metavar="FILE.html", default=None,
                        help="write an interactive attention explorer (every layer and head of "
                             "the three kinds of attention) as one self-contained page; with "
                             "several sentences, FILE_1.html, FILE_2.html, ...")
    parser.add_argument("--engine", choices=ENGINES, default="tensorflow",
                        help="tensorflow: the model in TensorFlow (default); ctranslate2: "
                             "the run converted once to a CTranslate2 model directory inside "
                             "it and translated by CTranslate2, the same search "
                             "(needs the ctranslate2 package; no --plot or --html)")
    parser.add_argument("--quantization", choices=CLI_QUANTIZATIONS, default=None,
                        help="with --engine ctranslate2: the weights' type (default float32; "
                             "int8 is faster on CPUs, its translations differ a little)")
    parser.add_argument("--show-tokens", action="store_true",
                        help="also print the source and output subword tokens")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's own start-up and device messages on "
                             "standard error (hidden by default)")
    add_strategy_module_argument(parser)
    args = parser.parse_args(argv)
    import_strategy_modules(parser, args.strategy_module)
    if args.layer is not None and args.plot is None:
        parser.error("--layer chooses what --plot draws; add --plot FILE.png")
    if args.quantization is not None and args.engine != "ctranslate2":
        parser.error("--quantization is for --engine ctranslate2")
    if args.engine == "ctranslate2":
        for option, value in (("--plot", args.plot), ("--html", args.html)):
            if value is not None:
                parser.error(f"{option} shows the attention weights of the TensorFlow engine; "
                             "drop --engine ctranslate2")
    try:  # the options' combination, checked before any file is read
        search = search_strategy(args)
        if args.engine == "ctranslate2":
            search.ctranslate2_options()  # NotSupportedError before any conversion
    except ValueError as err:
        parser.error(str(err))
    return args


def _add_search_arguments(parser):
    """The options that choose the search: the run's evaluation beam (default), beam or sampling."""
    group = parser.add_argument_group(
        "search", "By default the search the run was evaluated with (train.py's --eval-beam: "
                  "beam 4 for real corpora, greedy for the toy corpus); --beam or --n-best "
                  "for beam search; any of --temperature, --top-k, --top-p, --seed for "
                  "sampling (which draws one output per sentence, so no --beam or --n-best "
                  "with it). --search NAME chooses a registered strategy by name instead; "
                  "the options above then set its fields of the same meaning (--beam its "
                  "size), and --setting FIELD=VALUE any field."
    )
    group.add_argument("--search", default=None, metavar="NAME",
                       help="a registered search strategy "
                            "(transformer.decoding.strategies.registered(): "
                            f"{', '.join(registered())}, and those of --strategy-module)")
    group.add_argument("--setting", action="append", default=[], metavar="FIELD=VALUE",
                       help="with --search: set a field of the strategy (a number, None, "
                            "True, False or a word); may be repeated")
    group.add_argument("--beam", type=positive_int, default=None, metavar="N",
                       help="beam size; 1 is greedy decoding, the paper uses 4 (default: the "
                            "run's evaluation beam, 1 if its config.json has none; 4 and at "
                            "least N with --n-best N)")
    group.add_argument("--alpha", type=non_negative_float, default=None,
                       help="length penalty exponent of beam search (default 0.6)")
    group.add_argument("--n-best", type=positive_int, default=None, metavar="N",
                       help="print the N best translations of each sentence, best first, "
                            f"each followed by a tab and its score; {_SCORE_HELP}")
    group.add_argument("--scores", action="store_true",
                       help=f"print a tab and the score after each translation; {_SCORE_HELP}")
    group.add_argument("--temperature", type=positive_float, default=None, metavar="T",
                       help="sample with the logits divided by T (> 0; below 1 closer to "
                            "greedy, above 1 more varied; default 1 when sampling)")
    group.add_argument("--top-k", type=positive_int, default=None, metavar="K",
                       help="sample from the K most probable tokens only (1 is greedy)")
    group.add_argument("--top-p", type=probability, default=None, metavar="P",
                       help="sample from the fewest most probable tokens whose probability "
                            "reaches P, in (0, 1] (nucleus sampling)")
    group.add_argument("--seed", type=non_negative_int, default=None, metavar="S",
                       help="seed of the sampling: the same seed gives the same translations "
                            "of the same input (default: a new random seed each run)")


def search_strategy(args, run_dir=None):
    """The one strategy the search options ask for, in the command line's words:
    `transformer.decoding.search_options.search_strategy` of the parsed arguments (its
    docstring says which options make which strategy; greedy when `run_dir` is
    None, which is how `parse_args` checks the options before reading any file).

    Raises:
        ValueError: options that do not go together.
    """
    return options_strategy(SearchOptions.from_namespace(args), run_dir)


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
    return attention_axes(name, result.input_tokens, result.tokens)


def _write_explorers(args, sentences, results):
    """`--html`: one attention explorer page per sentence."""
    for sentence, result, path in zip(
        sentences, results, _plot_paths(args.html, len(results)), strict=True
    ):
        if not result.tokens:
            logging.warning("Not writing %s: the sentence is empty.", path)
            continue
        page = attention_explorer_html(
            result.attention_weights, result.input_tokens, result.tokens, sentence=sentence,
            translation=result.text, model_name=str(args.run),
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
        print(f"saved {path} (attention explorer)", file=sys.stderr)


class BadInputError(ValueError):
    """Standard input holds lines that are not valid UTF-8; each is already reported."""


def decode_lines(raw_lines, name="<stdin>"):
    """Decodes byte lines as UTF-8; returns `(sentences, errors)`.

    `errors` holds one message per bad line, `NAME:LINE: not valid UTF-8 (byte
    0xNN at column N)`, lines and columns (bytes) counted from 1.

    Example:
        >>> decode_lines([b"o gato\\n", b"o gato \\xff preto\\n"])
        (['o gato'], ['<stdin>:2: not valid UTF-8 (byte 0xff at column 8)'])
    """
    sentences, errors = [], []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            errors.append(f"{name}:{number}: not valid UTF-8 (byte 0x{raw[error.start]:02x} "
                          f"at column {error.start + 1})")
            continue
        if number == 1:  # a byte-order mark is no part of the text (as in the TSV reader)
            line = line.removeprefix("\ufeff")
        sentences.append(line.rstrip("\r\n"))
    return sentences, errors


def _read_sentences(args):
    if args.sentences:
        return args.sentences
    if sys.stdin.isatty():
        raise ValueError(
            "no sentences given: pass them as arguments or on standard input, one per line."
        )
    sentences, errors = decode_lines(sys.stdin.buffer)
    if errors:
        for message in errors:
            print(f"{PROG}: error: {message}", file=sys.stderr)
        raise BadInputError(f"{len(errors)} line(s) of standard input are not valid UTF-8")
    return sentences


def _ctranslate2_results(args, sentences, search):
    """`--engine ctranslate2`: the run's CTranslate2 export (converted once), translated."""
    model_dir = ctranslate2_model(args.run, args.quantization or "float32", report=_note)
    translator = CTranslate2Translator(model_dir)
    return translator.translate(
        list(sentences), search=search,
        max_length=DEFAULT_MAX_OUTPUT_LENGTH if args.max_length is None else args.max_length)


def _note(line):
    """A progress line (a conversion) on standard error."""
    print(line, file=sys.stderr)


def _print_results(args, results, search):
    """One line per translation (the strategy's `results_per_sentence` per sentence,
    with their scores when more than one), with --scores and tokens."""
    several = search.results_per_sentence > 1
    hypotheses = results if several else [[result] for result in results]
    scores = args.scores or several
    for result in itertools.chain.from_iterable(hypotheses):
        print(f"{result.text}\t{result.score:.4f}" if scores else result.text)
        if args.show_tokens:
            print("  source tokens:", " ".join(result.input_tokens))
            print("  output tokens:", " ".join(result.tokens))
    sys.stdout.flush()


def run(args):
    sentences = _read_sentences(args)
    if args.plot is not None and Path(args.plot).suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ValueError(f"--plot {args.plot}: expected a .png, .pdf or .svg file name.")
    if args.html is not None and Path(args.html).suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"--html {args.html}: expected a .html file name.")
    if not sentences:
        return 0
    search = search_strategy(args, args.run)
    if args.engine == "ctranslate2":
        _print_results(args, _ctranslate2_results(args, sentences, search), search)
        return 0

    translator = tensorflow_translator(args.run)
    num_layers = translator.transformer.config.decoder_layers
    layer_name = None
    if args.plot is not None:
        layer_name = _layer_name(args.layer, num_layers)
        valid = {f"encoder_layer{i}" for i in range(1, translator.transformer.config.num_layers + 1)}
        valid |= {f"decoder_layer{i}_block{b}" for i in range(1, num_layers + 1) for b in (1, 2)}
        if layer_name not in valid:
            raise ValueError(
                f"--layer {args.layer}: expected a decoder layer number 1 to {num_layers} "
                "or one of encoder_layer{i}, decoder_layer{i}_block1, decoder_layer{i}_block2."
            )

    results = translator(
        list(sentences), max_length=args.max_length,
        return_attention=args.plot is not None or args.html is not None, search=search,
    )
    _print_results(args, results, search)
    if search.results_per_sentence > 1:  # the best of each sentence is what gets plotted
        results = [best[0] for best in results]

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
    if args.html is not None:
        _write_explorers(args, sentences, results)
    return 0


def main(argv=None) -> int:
    """Runs `translate.py` with `argv` (default: the command line's); returns the exit status."""
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not args.verbose and "tensorflow" not in sys.modules:
        hide_native_stderr()  # for the whole run: TensorFlow is imported lazily
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BadInputError:
        return 1  # every bad line is reported; nothing was translated
    except Exception as err:  # noqa: BLE001 - one line for people, no traceback
        return report_error(PROG, err)


if __name__ == "__main__":
    sys.exit(main())
