"""What one request may ask of the server, and the strict reading of its body.

Every option that multiplies the decoder's work has a maximum (`Limits`),
and so has the product that bounds one decoder call's memory: sentences x
beam (the strategy's `rows_per_sentence`) x output length, `max_work`. A
request over any of them is refused before it reaches the decoder, with a
4xx whose message names the limit and the server option that sets it.

The body is read as strict JSON (RFC 8259): valid UTF-8, no `NaN` or
`Infinity`, no duplicate keys, no lone surrogate in a sentence, numbers
that fit the decoder's types, and no deeper nesting than the request's
own shape. Any other body is a 400 with a one-line message.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import re

from transformer.constants import DEFAULT_MAX_OUTPUT_LENGTH
from transformer.decoding.search_options import SearchOptions, search_strategy

__all__ = ["INT_RANGES", "NUMBER_RANGES", "OPTIONS", "Limits", "RequestError",
           "TranslateRequest", "check_work", "output_length", "parse_request",
           "request_search"]

# The decoding options of a request: translate.py's, by the same names.
OPTIONS = ("search", "beam", "alpha", "n_best", "temperature", "top_k", "top_p", "seed",
           "max_length")

# Integer options: (minimum, maximum, the `Limits` field that caps it, or None).
# seed is an int64 of the sampler, top_k an int32 of the search.
INT_RANGES = {"beam": (1, None, "max_beam"), "n_best": (1, None, "max_n_best"),
              "max_length": (1, None, "max_output_length"), "top_k": (1, 2**31 - 1, None),
              "seed": (0, 2**63 - 1, None)}
# Number options: (minimum, maximum, whether the minimum itself is allowed). The
# search computes in float32: these ranges keep its scores and draws finite.
NUMBER_RANGES = {"alpha": (0.0, 10.0, True), "temperature": (1e-3, 1e3, True),
                 "top_p": (0.0, 1.0, False)}

# The deepest nesting a good request has: an object holding a list of strings.
_MAX_DEPTH = 2
_BRACKETS = re.compile(rb'[\[\]{}"\\]')


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask, and how many may wait.

    Attributes:
        max_sentences: sentences in one request.
        max_chars: characters of one sentence.
        max_body: bytes of a request's body.
        max_beam: a beam's size (hypotheses kept per sentence).
        max_n_best: translations returned per sentence.
        max_output_length: output tokens per sentence ("max_length").
        max_work: sentences x beam x output length of one request, and of one
            decoder call made of several requests: what bounds the decoder's memory.
        max_waiting: requests waiting for the decoder; more are answered 429.
        timeout: seconds a request may wait for its translation; then 504.
    """

    max_sentences: int = 64
    max_chars: int = 2000
    max_body: int = 1 << 20
    max_beam: int = 16
    max_n_best: int = 16
    max_output_length: int = 256
    max_work: int = 64 * 4 * DEFAULT_MAX_OUTPUT_LENGTH
    max_waiting: int = 256
    timeout: float = 30.0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not 0 < value < math.inf:
                raise ValueError(f"Received an invalid value for argument `{field.name}`, "
                                 f"expected a positive number. Received: {field.name}={value!r}")

    def option_maximum(self, name: str) -> int | None:
        """The largest value a request may give the integer option `name`."""
        low, high, field = INT_RANGES[name]
        return getattr(self, field) if field else high


class RequestError(Exception):
    """A request the server refuses: its HTTP status and a one-line message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class TranslateRequest:
    """A checked request: its sentences, decoding options, and whether it gave one "text"."""

    sentences: list
    options: dict
    single: bool = False


def _json_depth_ok(body: bytes) -> bool:
    """Whether `body` nests objects and lists at most `_MAX_DEPTH` deep (strings skipped).

    Checked before parsing, so that deep nesting costs one scan, never recursion.
    """
    depth, in_string, skip = 0, False, -1
    for match in _BRACKETS.finditer(body):
        at, char = match.start(), match.group()
        if at == skip:  # the character after a backslash in a string
            continue
        if in_string:
            if char == b"\\":
                skip = at + 1
            elif char == b'"':
                in_string = False
        elif char == b'"':
            in_string = True
        elif char in (b"[", b"{"):
            depth += 1
            if depth > _MAX_DEPTH:
                return False
        elif char in (b"]", b"}"):
            depth -= 1
    return True


def _unique_keys(pairs):
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicate = next(key for key in keys if keys.count(key) > 1)
        raise RequestError(400, f"the key {duplicate!r} appears twice in one object")
    return dict(pairs)


def _no_constant(name):
    raise RequestError(400, f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise RequestError(400, f"the number {text[:20]} is out of range")
    return value


def _loads(body: bytes):
    """The JSON value of `body`, strictly; a RequestError 400 for anything else."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"the body is not valid UTF-8 (byte {err.start})") from None
    if not _json_depth_ok(body):
        raise RequestError(400, f"the JSON nests deeper than a request does ({_MAX_DEPTH})")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                          parse_float=_finite_float)
    except json.JSONDecodeError as err:
        raise RequestError(400, f"the body is not valid JSON: {err.msg} at line {err.lineno} "
                                f"column {err.colno}") from None
    except (ValueError, RecursionError):  # e.g. an integer of more than 4300 digits
        raise RequestError(400, "the body holds a number out of range") from None


def parse_request(body: bytes, limits: Limits) -> TranslateRequest:
    """The sentences and decoding options of a request's JSON body, checked.

    Raises:
        RequestError: 400 for a body that is not strict JSON, a wrong type, an
            unknown key, no sentence or an option out of its range; 413 for more
            sentences or characters than `limits` allow.
    """
    request = _loads(body)
    if not isinstance(request, dict):
        raise RequestError(400, "expected a JSON object such as {\"sentences\": [\"...\"]}")
    unknown = sorted(set(request) - {"sentences", "text", *OPTIONS})
    if unknown:
        raise RequestError(400, f"unknown keys {[key[:40] for key in unknown[:5]]}; expected "
                                f"\"sentences\" (or \"text\") and any of {list(OPTIONS)}")
    if ("sentences" in request) == ("text" in request):
        raise RequestError(400, "expected one of \"sentences\" (a list of strings) or "
                                "\"text\" (a string)")
    single = "text" in request
    sentences = [request["text"]] if single else request["sentences"]
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise RequestError(400, "\"sentences\" must be a list of strings and \"text\" a string")
    _check_sentences(sentences, limits)
    options = {name: request[name] for name in OPTIONS if request.get(name) is not None}
    for name, value in options.items():
        _check_option(name, value, limits)
    return TranslateRequest(sentences, options, single)


def _check_sentences(sentences: list, limits: Limits) -> None:
    if not sentences:
        raise RequestError(400, "\"sentences\" is empty: nothing to translate")
    if len(sentences) > limits.max_sentences:
        raise RequestError(413, f"{len(sentences)} sentences: at most {limits.max_sentences} "
                                "per request (the server's --max-sentences)")
    for index, sentence in enumerate(sentences):
        if len(sentence) > limits.max_chars:
            raise RequestError(413, f"sentence {index} has {len(sentence)} characters: at most "
                                    f"{limits.max_chars} (the server's --max-chars)")
        try:
            sentence.encode("utf-8")
        except UnicodeEncodeError as err:
            raise RequestError(400, f"sentence {index} holds a lone surrogate at character "
                                    f"{err.start}: not text") from None


def _check_option(name: str, value, limits: Limits) -> None:
    """A RequestError 400 unless the option's value has its type and is in its range."""
    if name == "search":
        if not isinstance(value, str):
            raise RequestError(400, "\"search\" must be a strategy's name (a string)")
        return
    if name in INT_RANGES:
        low, high = INT_RANGES[name][0], limits.option_maximum(name)
        field = INT_RANGES[name][2]
        where = f" (the server's --{field.replace('_', '-')})" if field else ""
        if isinstance(value, bool) or not isinstance(value, int):
            raise RequestError(400, f"\"{name}\" must be an integer from {low} to {high}")
        if not low <= value <= high:
            raise RequestError(400, f"\"{name}\" must be from {low} to {high}{where}; "
                                    f"received {_short(value)}")
        return
    low, high, low_allowed = NUMBER_RANGES[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(400, f"\"{name}\" must be a number")
    if not (low <= value if low_allowed else low < value) or value > high:
        bound = "[" if low_allowed else "("
        raise RequestError(400, f"\"{name}\" must be in {bound}{low}, {high}]; received "
                                f"{_short(value)}")


def _short(value) -> str:
    """A number for a message, at most about 30 characters."""
    text = str(value)
    return text if len(text) <= 30 else f"a number of {len(text)} digits"


def _spell(option: str) -> str:
    """An option as a request names it."""
    return f"\"{option}\""


def request_search(options: dict, run_dir, engine: str = "tensorflow"):
    """The search strategy of a request's options, as translate.py makes its own
    (`transformer.decoding.search_options.search_strategy`).

    Raises:
        RequestError: 400 for options that do not go together, a strategy that
            refuses its fields, or one that `engine` cannot run.
    """
    values = {name: options.get(name) for name in OPTIONS if name != "max_length"}
    try:  # "search" names a registered strategy, as translate.py's --search does
        search = search_strategy(SearchOptions(**values), run_dir, spell=_spell)
        if engine == "ctranslate2":
            search.ctranslate2_options()  # NotSupportedError, a ValueError
        return search
    except (ValueError, TypeError) as err:  # TypeError: a user's strategy refusing a type
        raise RequestError(400, str(err).splitlines()[0][:300] if str(err) else
                           type(err).__name__) from None


def output_length(max_length: int | None, limits: Limits) -> int:
    """The output cap a request decodes with: its "max_length", or the default
    cap (`transformer.constants.DEFAULT_MAX_OUTPUT_LENGTH`), at most the server's."""
    length = DEFAULT_MAX_OUTPUT_LENGTH if max_length is None else max_length
    return min(length, limits.max_output_length)


def check_work(count: int, search, length: int, limits: Limits) -> int:
    """The work of decoding `count` sentences with `search` to `length` tokens:
    sentences x rows per sentence x output length, checked against `limits`.

    Raises:
        RequestError: 400 for a strategy that keeps more rows or returns more
            results per sentence than the server's maxima; 413 for work over
            `limits.max_work`.
    """
    rows, results = search.rows_per_sentence, search.results_per_sentence
    if rows > limits.max_beam:
        raise RequestError(400, f"the search keeps {rows} hypotheses per sentence: at most "
                                f"{limits.max_beam} (the server's --max-beam)")
    if results > limits.max_n_best:
        raise RequestError(400, f"the search returns {results} translations per sentence: at "
                                f"most {limits.max_n_best} (the server's --max-n-best)")
    work = count * rows * length
    if work > limits.max_work:
        raise RequestError(413, f"{count} sentences x {rows} hypotheses x {length} output "
                                f"tokens = {work}: at most {limits.max_work} per request (the "
                                "server's --max-work)")
    return work
