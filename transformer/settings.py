"""The settings' schema: each field of `RunConfig` and `TransformerConfig` says
what it means, in which section it belongs and how a command line sets it.

The metadata sits on the dataclass field, next to its default, so that one
line states each setting once: `train.py` builds its options and their
`--help` from it (`transformer.cli.train.build_parser`), and the Python API
reads the same text (`RunConfig.describe("epochs")`). Standard library only.

Example:

>>> import dataclasses
>>> @dataclasses.dataclass
... class Settings:
...     steps: int = setting(10, "updates to train", section="schedule", kind="positive_int")
>>> field = dataclasses.fields(Settings)[0]
>>> option_flag(field), settings_option(field).help
('--steps', 'updates to train')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

# The sections of the settings, in the order `--help` shows them.
SECTIONS = {
    "data": "data (the corpus and its subwords)",
    "model": "model (the preset; --num-layers etc. override it)",
    "schedule": "schedule (how long and how fast it learns)",
    "batches": "batches",
    "run": "run (the run directory, its checkpoints and the final evaluation)",
    "performance": "performance",
    "scale": "scale (several devices or machines)",
}

# How a command line reads a value: the name of an argument type of
# `transformer.cli.common` (for numbers and durations), or one of these.
KINDS = ("text", "choice", "flag", "switch", "integer", "number", "positive_int",
         "non_negative_int", "rate", "duration", "learning_rate")

_KEY = "setting"


@dataclasses.dataclass(frozen=True)
class Option:
    """What the metadata of one setting holds.

    Attributes:
        help: what the setting means, one sentence or two, without its default.
        section: a key of `SECTIONS`.
        kind: a name of `KINDS`: how the command line parses it.
        flag: the command-line option ("--dropout"); None: the field's name with
            dashes. An empty string: the setting has no option.
        metavar: the value's name in `--help`.
        choices: the allowed values of a "choice".
        default_help: the default as `--help` states it, when the field's
            default does not say it: a `str.format` template (its names:
            `transformer.cli.train`'s `default_context`), or a callable that
            returns the text.

    The default itself is the field's, for the command line and the Python API
    alike: `train.py` leaves an option not given to it.
    """

    help: str
    section: str
    kind: str = "text"
    flag: str | None = None
    metavar: str | None = None
    choices: tuple | None = None
    default_help: str | Callable[[], str] | None = None

    def __post_init__(self):
        if self.section not in SECTIONS:
            raise ValueError(f"Unknown section {self.section!r}; expected one of {list(SECTIONS)}")
        if self.kind not in KINDS:
            raise ValueError(f"Unknown kind {self.kind!r}; expected one of {list(KINDS)}")


def setting(default: Any = None, help: str = "", *, section: str, **option: Any) -> Any:
    """A dataclass field with its default and its `Option` (see its attributes)."""
    return dataclasses.field(default=default,
                             metadata={_KEY: Option(help=help, section=section, **option)})


def settings_option(field: dataclasses.Field) -> Option | None:
    """The `Option` of a dataclass field, or None for a field declared without one."""
    return field.metadata.get(_KEY)


def option_flag(field: dataclasses.Field) -> str:
    """The command-line option of a field ('' when it has none)."""
    option = settings_option(field)
    if option is not None and option.flag is not None:
        return option.flag
    return "--" + field.name.replace("_", "-")


def describe(cls, name: str) -> str:
    """The help text of the setting `name` of the dataclass `cls`."""
    for field in dataclasses.fields(cls):
        if field.name == name:
            option = settings_option(field)
            return option.help if option is not None else ""
    raise KeyError(name)
