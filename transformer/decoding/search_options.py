"""Search options (translate.py's, a served request's) -> one search strategy object.

`translate.py` and `transformer-serve` take the same decoding options: a
beam, its length penalty and n-best list, or the sampling knobs, or the name
of a registered strategy with its fields. `SearchOptions` holds them and
`search_strategy` makes the strategy they ask for, so that both front ends
decode alike. Standard library only (no TensorFlow): the command line checks
its options before TensorFlow starts.

Messages name the options through `spell` (the command line's `--n-best`, a
request's `"n_best"`), so each front end's users read their own words.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable

from transformer.constants import DEFAULT_ALPHA, DEFAULT_BEAM_SIZE
from transformer.decoding.strategies import Beam, Greedy, Sample, run_strategy, strategy_class

__all__ = ["OPTION_FIELDS", "SearchOptions", "cli_spelling", "search_strategy"]

# The search options and the strategy fields of the same meaning (`search=NAME`).
OPTION_FIELDS = {"beam": "size", "alpha": "alpha", "n_best": "n_best",
                 "temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
                 "seed": "seed"}


def cli_spelling(option: str) -> str:
    """An option as the command line writes it: `n_best` -> `--n-best`."""
    return "--" + option.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """The decoding options of one translation request; None: not given.

    Attributes:
        search: the name of a registered strategy (`transformer.decoding.strategies.registered()`).
        settings: `FIELD=VALUE` texts that set fields of the named strategy.
        beam, alpha, n_best: beam search's size, length penalty and n-best list.
        temperature, top_k, top_p, seed: sampling's knobs.
    """

    search: str | None = None
    settings: tuple[str, ...] = ()
    beam: int | None = None
    alpha: float | None = None
    n_best: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    @classmethod
    def from_namespace(cls, args) -> SearchOptions:
        """The options of translate.py's parsed arguments (`--setting` is `settings`)."""
        values = {field.name: getattr(args, field.name, None)
                  for field in dataclasses.fields(cls) if field.name != "settings"}
        return cls(**values, settings=tuple(getattr(args, "setting", ()) or ()))

    @property
    def samples(self) -> bool:
        """Whether any sampling knob is given."""
        return any(v is not None for v in (self.temperature, self.top_k, self.top_p, self.seed))


def search_strategy(options: SearchOptions, run_dir=None,
                    spell: Callable[[str], str] = cli_spelling):
    """The one strategy the options ask for.

    `search=NAME` makes the registered strategy `NAME` of the options
    (`named_strategy`). Otherwise any sampling knob samples; `beam` N or
    `n_best` N searches a beam (of max(4, N) for `n_best` alone); with none
    of them, the run decodes as it was evaluated
    (`transformer.decoding.strategies.run_strategy(run_dir)`; greedy when `run_dir`
    is None, which is how translate.py checks its options before reading
    any file). `alpha` is the beam's length penalty (a beam of 1 with
    `alpha` is greedy decoding scored by log P / lp).

    Args:
        options: the request's `SearchOptions`.
        run_dir: the run whose evaluation search is the default, or None.
        spell: how messages name an option (default: the command line's).

    Raises:
        ValueError: options that do not go together, in `spell`'s words.
    """
    if options.search is not None:
        return named_strategy(options, spell)
    if options.settings:
        raise ValueError(f"{spell('setting')} sets a field of the strategy that "
                         f"{spell('search')} NAME chooses; add {spell('search')}.")
    n_best = options.n_best or 1
    beam = options.beam
    if beam is None and n_best > 1:
        beam = max(DEFAULT_BEAM_SIZE, n_best)
    if n_best > (beam or 1):
        raise ValueError(f"Received {spell('n_best')} {n_best} and {spell('beam')} {beam}: "
                         f"the n-best list comes from the beam, expected {spell('beam')} >= "
                         f"{spell('n_best')}.")
    if options.samples:
        if beam is not None and beam > 1:
            knobs = ", ".join(spell(name) for name in ("temperature", "top_k", "top_p", "seed"))
            raise ValueError(f"Received {spell('beam')} {beam} with sampling ({knobs}): "
                             f"sampling draws one output per sentence, expected "
                             f"{spell('beam')} 1 and {spell('n_best')} 1.")
        return Sample(temperature=1.0 if options.temperature is None else options.temperature,
                      top_k=options.top_k, top_p=options.top_p, seed=options.seed)
    evaluated = Greedy() if run_dir is None or beam is not None else run_strategy(run_dir)
    if beam is None and options.alpha is None:
        return evaluated  # as the run was evaluated
    if beam is None:
        beam = evaluated.rows_per_sentence
    if beam == 1 and options.alpha is None:
        return Greedy()
    return Beam(size=beam, alpha=DEFAULT_ALPHA if options.alpha is None else options.alpha,
                n_best=n_best)


def named_strategy(options: SearchOptions, spell: Callable[[str], str] = cli_spelling):
    """`search=NAME`: the registered strategy class `NAME`, made with the fields
    that the search options (`OPTION_FIELDS`) and `settings` give; its
    defaults for the others.

    Raises:
        ValueError: an unknown name or field, or a value the strategy refuses.
    """
    kind = strategy_class(options.search)
    fields = ({field.name for field in dataclasses.fields(kind) if field.init}
              if dataclasses.is_dataclass(kind) else set())
    known = ", ".join(sorted(fields)) or "none"
    values = {}
    for option, field in OPTION_FIELDS.items():
        value = getattr(options, option)
        if value is None:
            continue
        if field not in fields:
            raise ValueError(f"{spell(option)} sets the field {field!r}, which "
                             f"{spell('search')} {options.search} does not have (its "
                             f"fields: {known}).")
        values[field] = value
    for setting in options.settings:
        field, equals, text = setting.partition("=")
        if not equals or field not in fields:
            raise ValueError(f"{spell('setting')} {setting}: expected FIELD=VALUE with a field "
                             f"of {spell('search')} {options.search} ({known}).")
        values[field] = _setting_value(text)
    return kind(**values)


def _setting_value(text):
    """A `--setting` value: a Python literal (number, None, True, False), else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
