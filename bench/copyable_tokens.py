"""How well a translation system copies what should be copied: names, versions,
options and paths.

A source token is *copyable* when it has a digit, a capital letter after its
first character ("GNOME", "iPhone"), a slash, or a leading dash ("-v",
"--help"), and the reference translation holds it unchanged. The measure is the
share of copyable tokens that the system's output also holds unchanged. Tokens
are split on white space and stripped of the punctuation around them (quotes,
brackets, and a trailing comma, full stop, colon, semicolon, question or
exclamation mark), so that "(v2.0)," counts as "v2.0"; a leading dash is kept.

Works on plain text, for this project's outputs and the peer's alike (used by
`bench/peer_joeynmt/run.py`). Not part of the library.

Example:

    >>> copyable_share(["Abrir /etc/fstab con -v"], ["Open /etc/fstab with -v"],
    ...                ["Open /etc/fstab with -V"])["copied_share"]
    0.5

Or, from the command line, on a test TSV and one output per line:

    python bench/copyable_tokens.py test.tsv outputs.txt
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from collections.abc import Sequence

# Stripped from both ends of a token; a leading dash stays (options).
_AROUND = "\"'`“”‘’«»()[]{}<>,.;:!?¡¿…"


def core(token: str) -> str:
    """The token without the punctuation around it (`_AROUND`).

    >>> core('"(v2.0),'), core("--help."), core("/usr/bin/")
    ('v2.0', '--help', '/usr/bin/')
    """
    return token.strip(_AROUND)


def kinds(token: str) -> list[str]:
    """Why a (stripped) token should be copied: any of `digit`, `inner_capital`,
    `slash`, `leading_dash`; empty when none applies.

    >>> kinds("GNOME"), kinds("Abrir"), kinds("--no-color"), kinds("x86_64/")
    (['inner_capital'], [], ['leading_dash'], ['digit', 'slash'])
    """
    found = []
    if any(ch.isdigit() for ch in token):
        found.append("digit")
    if any(ch.isupper() for ch in token[1:]):
        found.append("inner_capital")
    if "/" in token:
        found.append("slash")
    if token.startswith("-") and token.lstrip("-"):
        found.append("leading_dash")
    return found


def _cores(text: str) -> collections.Counter:
    return collections.Counter(c for c in (core(t) for t in text.split()) if c)


def copyable_share(
    sources: Sequence[str], references: Sequence[str], outputs: Sequence[str]
) -> dict:
    """Counts copyable source tokens and how many of them the outputs copied.

    Each occurrence counts once; an output copies a token as many times as it
    holds it (a token twice in the source and once in the output is copied
    once).

    Args:
        sources: the source sentences.
        references: their reference translations.
        outputs: the system's translations, in the same order.

    Returns:
        A dict: `candidates` (source tokens of one of the kinds), `copyable`
        (of those, held by the reference), `copied` (of those, held by the
        output too), `copied_share` (`copied / copyable`, None without
        copyable tokens) and `by_kind` (the same three counts for each kind;
        a token of two kinds counts in both).

    Raises:
        ValueError: if the three sequences differ in length.
    """
    if not len(sources) == len(references) == len(outputs):
        raise ValueError(
            f"copyable_share needs as many references and outputs as sources; received "
            f"{len(sources)} sources, {len(references)} references, {len(outputs)} outputs."
        )
    totals = collections.Counter()
    by_kind = collections.defaultdict(collections.Counter)
    for source, reference, output in zip(sources, references, outputs, strict=True):
        in_reference, in_output = _cores(reference), _cores(output)
        for token, count in _cores(source).items():
            token_kinds = kinds(token)
            if not token_kinds:
                continue
            copyable = min(count, in_reference[token])
            copied = min(copyable, in_output[token])
            for counter in (totals, *(by_kind[k] for k in token_kinds)):
                counter["candidates"] += count
                counter["copyable"] += copyable
                counter["copied"] += copied
    result = {name: totals[name] for name in ("candidates", "copyable", "copied")}
    result["copied_share"] = (
        round(totals["copied"] / totals["copyable"], 4) if totals["copyable"] else None
    )
    result["by_kind"] = {
        kind: {name: counts[name] for name in ("candidates", "copyable", "copied")}
        for kind, counts in sorted(by_kind.items())
    }
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test_tsv", help="source<TAB>reference, one pair a line")
    parser.add_argument("outputs", help="one translation a line, in the order of the pairs")
    args = parser.parse_args(argv)
    try:
        with open(args.test_tsv, encoding="utf-8") as f:
            pairs = [line.rstrip("\n").split("\t") for line in f]
        with open(args.outputs, encoding="utf-8") as f:
            outputs = [line.rstrip("\n") for line in f]
    except OSError as error:
        print(f"copyable_tokens: {error}", file=sys.stderr)
        return 2
    for number, pair in enumerate(pairs, 1):
        if len(pair) != 2:
            print(f"copyable_tokens: {args.test_tsv}:{number}: expected source<TAB>reference",
                  file=sys.stderr)
            return 2
    try:
        result = copyable_share([s for s, _ in pairs], [r for _, r in pairs], outputs)
    except ValueError as error:
        print(f"copyable_tokens: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
