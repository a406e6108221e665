"""Builds a Spanish-to-English Bible corpus, one verse a line, as train/valid/test TSV files.

The source side is the Reina-Valera 1909 (SWORD module `spaRV1909eb`), the
target side the World English Bible (`engWEB2015eb`); both are public domain
and packaged by Debian. `mod2imp` prints a module as `$$$Book C:V` lines, each
followed by the verse in OSIS markup. This script turns that markup into plain
text:

- footnotes and cross-references (`<note>`, with everything inside) go;
- headings (`<title>`) and speaker labels (`<speaker>`) go with their text, but
  the canonical psalm superscriptions (`<title canonical="true">`) stay: the
  Spanish module has them as the start of verse 1;
- word tags (`<w>` with Strong's numbers) and phrase tags (`<transChange>`,
  `<q>`, `<name>`, `<seg>`, `<item>`, ...) go and their text stays, a space
  kept between two elements that touch (`God</w><w>created`) or that a removed
  note separated;
- milestones (`<l/>`, `<lg/>`, `<lb/>`, `<div/>`, `<chapter/>`, `<milestone/>`)
  separate words; the end of a book (`<div type="book" eID=...>`) ends the
  verse, since the WEB appends its glossary to Revelation 22:21;
- entities are unescaped and runs of white space become one space;
- the Spanish capitals at chapter starts ("EN el principio") take their usual
  case ("En el principio"), and the Spanish colophons of the epistles ("Amén.
  Escrita de Roma con Epafrodito.") go, as the WEB has none.

Module headings and verse 0 (book and chapter introductions) are not verses.
Verses present in both modules (not the WEB's deuterocanonical books) are
paired. The Reina-Valera follows the Hebrew numbering in a few chapters
(Numbers 13:1 is the English 12:16), where a pair would join two different
verses; chapters and runs of verses whose lengths match better one to three
verses apart are left out (`misnumbered_verses`), and so are verses empty on
one side and pairs whose word counts differ more than 2.5 times. The pairs are
split by the SHA-256 of their reference ("Genesis 1:1"), so the same verse
always lands in the same file: 4% each for validation and test, the rest for
training. `--list-tags` lists the OSIS elements of the verses and how each is
treated.

Example:

    apt-get update && apt-get install -y sword-text-sparv sword-text-web libsword-utils
    python bench/bible_corpus.py --output data/bible-es-en
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import html
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SPANISH_MODULE = "spaRV1909eb"
ENGLISH_MODULE = "engWEB2015eb"
INSTALL = "apt-get update && apt-get install -y sword-text-sparv sword-text-web libsword-utils"

# Elements removed together with their text.
DROPPED = {"note", "title", "speaker"}
# Elements whose text is part of the verse; the tags themselves do not separate words.
INLINE = {
    "w", "transChange", "q", "name", "seg", "item", "hi", "foreign", "divineName",
    "rdg", "catchWord", "reference", "abbr", "added", "inscription",
}
# Layout elements (mostly milestones) that stand between words.
BLOCK = {"l", "lg", "lb", "div", "chapter", "milestone", "list", "p", "verse", "cell", "row"}

# Alignment checks (see misnumbered_verses and drop_misaligned).
SHIFTS = (-3, -2, -1, 1, 2, 3)
MIN_CHAPTER = 10
CHAPTER_GAP = 0.2
WINDOW = 6
WINDOW_GAP = 0.45
MAX_RATIO = 2.5

OPENING = "([{“‘«¿¡"
CLOSING = ".,;:!?)]}”’»…"

_COLOPHON = re.compile(r"(Amén\.) [^.]*\b(?:[Ee]scrita|[Ee]nviada)\b[^.]*\.$")
_WORD = re.compile(r"[^\W\d_]+")
_KEY = re.compile(r"(?P<book>.+) (?P<chapter>\d+):(?P<verse>\d+)")
_TOKEN = re.compile(r"<(/?)([A-Za-z][\w.:-]*)([^<>]*?)(/?)>|([^<]+|<)")


class CorpusError(Exception):
    """A problem the user can fix; its message is printed as one line."""


def run_mod2imp(module: str) -> str:
    """Returns `mod2imp MODULE`'s output; CorpusError when the tool or the module is missing."""
    exe = shutil.which("mod2imp")
    if exe is None:
        raise CorpusError(f"mod2imp not found; install the SWORD tools and modules with: {INSTALL}")
    proc = subprocess.run([exe, module], capture_output=True, check=False)
    text = proc.stdout.decode("utf-8", errors="replace")
    if proc.returncode != 0 or "$$$" not in text:
        raise CorpusError(
            f"mod2imp could not read the SWORD module {module}; install it with: {INSTALL}"
        )
    return text


def read_imp_file(path: Path) -> str:
    """Returns the text of an `.imp` file, CorpusError when it is missing or empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"cannot read {path}: {exc}") from None
    if "$$$" not in text:
        raise CorpusError(f"{path} has no $$$ entries; is it mod2imp output?")
    return text


def parse_imp(text: str) -> tuple[dict[str, str], collections.Counter]:
    """Splits mod2imp output into {reference: markup} for verses 1 and up.

    Also returns how many entries were skipped and why: module and testament
    headings (keys without chapter and verse) and verse 0 (introductions).
    """
    verses: dict[str, str] = {}
    skipped: collections.Counter = collections.Counter()
    key = None
    lines: list[str] = []

    def close() -> None:
        if key is None:
            return
        match = _KEY.fullmatch(key)
        if match is None:
            skipped["heading"] += 1
        elif int(match["verse"]) == 0:
            skipped["verse 0"] += 1
        else:
            verses[key] = " ".join(lines)

    for line in text.splitlines():
        if line.startswith("$$$"):
            close()
            key, lines = line[3:].strip(), []
        elif key is not None:
            lines.append(line)
    close()
    return verses, skipped


def _attribute(attrs: str, name: str) -> str | None:
    match = re.search(rf'\b{name}="([^"]*)"', attrs)
    return match[1] if match else None


def strip_osis(markup: str, unknown: collections.Counter | None = None) -> str:
    """Returns the plain text of one verse of OSIS markup (rules in the module docstring).

    Tags outside the known sets are treated as layout (their text kept, a word
    boundary at each tag) and counted in `unknown` when given.
    """
    out: list[str] = []
    skip_depth = 0
    boundary = ended = joined = False
    for match in _TOKEN.finditer(markup):
        closing, name, attrs, selfclosing, text = match.groups()
        if text is not None:
            if skip_depth:
                continue
            text = html.unescape(text)
            if out and (boundary or joined) and _needs_space(out[-1], text):
                out.append(" ")
            out.append(text)
            boundary = ended = joined = False
            continue
        if skip_depth:
            skip_depth += 0 if selfclosing else (-1 if closing else 1)
            continue
        if name == "div" and _attribute(attrs, "type") == "book" and _attribute(attrs, "eID"):
            break
        if name in DROPPED and not (name == "title" and _attribute(attrs, "canonical") == "true"):
            boundary = True
            skip_depth = 0 if (selfclosing or closing) else 1
        elif name in INLINE:
            if closing:
                ended = True
            elif ended:
                joined = True
        else:
            boundary = True
            if unknown is not None and name not in BLOCK and name != "title":
                unknown[name] += 1
    return " ".join("".join(out).split())


def _needs_space(before: str, after: str) -> bool:
    """Whether a removed tag between two runs of text stood between two words."""
    last, first = before[-1], after[0]
    if last.isspace() or first.isspace():
        return False
    return last not in OPENING and first not in CLOSING


def tag_inventory(texts) -> list[str]:
    """Lines naming each element that occurs in the markup strings, its count and how
    strip_osis treats it (for `--list-tags`, to check a new version of a module)."""
    names: collections.Counter = collections.Counter()
    for text in texts:
        for match in _TOKEN.finditer(text):
            if match[2] and not match[1]:
                names[match[2]] += 1
    treatment = {**dict.fromkeys(DROPPED, "dropped with its text"),
                 "title": "dropped with its text unless canonical=\"true\"",
                 **dict.fromkeys(INLINE, "tags dropped, text kept"),
                 **dict.fromkeys(BLOCK, "word boundary")}
    return [f"{name}\t{count}\t{treatment.get(name, 'UNKNOWN: word boundary, text kept')}"
            for name, count in names.most_common()]


def split_of(reference: str, share: float) -> str:
    """Returns 'test', 'valid' or 'train' for a verse reference, from its SHA-256 alone."""
    digest = hashlib.sha256(reference.encode("utf-8")).hexdigest()
    position = int(digest[:15], 16) / 16**15
    if position < share:
        return "test"
    if position < 2 * share:
        return "valid"
    return "train"


def pair_verses(spanish: dict[str, str], english: dict[str, str], unknown=None):
    """Returns [(reference, spanish text, english text)] in Spanish order, and unpaired counts."""
    pairs = [
        (reference, strip_osis(markup, unknown), strip_osis(english[reference], unknown))
        for reference, markup in spanish.items()
        if reference in english
    ]
    unpaired = {
        "only in Spanish": sum(1 for reference in spanish if reference not in english),
        "only in English": sum(1 for reference in english if reference not in spanish),
    }
    return pairs, unpaired


def drop_colophons(pairs):
    """Returns the pairs without the Spanish colophons of the epistles.

    The Reina-Valera ends the last verse of most epistles with a note on where
    the letter was written ("... Amén. Escrita de Roma con Epafrodito."), which
    the World English Bible does not have; in the last verse of a book, what
    follows "Amén." and says "escrita" or "enviada" goes.
    """
    books = [_KEY.fullmatch(reference)["book"] for reference, _, _ in pairs]
    trimmed = []
    for index, (reference, source, target) in enumerate(pairs):
        if index + 1 == len(pairs) or books[index + 1] != books[index]:
            source = _COLOPHON.sub(r"\1", source)
        trimmed.append((reference, source, target))
    return trimmed


def recase_chapter_openings(pairs):
    """Returns the pairs with the Spanish capitals at chapter starts in their usual case.

    The Reina-Valera prints the first word of each chapter in capitals ("EN el
    principio", "Y FUERON acabados"); in verse 1 the first all-capital word of
    two or more letters takes the casing the word has most often inside
    sentences elsewhere ("Jehová", "fueron"; lower case for a word seen
    nowhere else), with a capital at the start of a sentence.
    """
    casings: collections.Counter = collections.Counter()
    for _, source, _ in pairs:
        for match in _WORD.finditer(source):
            before = source[:match.start()].rstrip()
            if before and (before[-1].isalpha() or before[-1] == ",") and not match[0].isupper():
                casings[match[0]] += 1
    usual: dict[str, str] = {}
    for word, _ in casings.most_common():
        usual.setdefault(word.lower(), word)
    recased = []
    for reference, source, target in pairs:
        match = next((m for m in _WORD.finditer(source) if len(m[0]) > 1 and m[0].isupper()), None)
        if reference.endswith(":1") and match is not None:
            word = usual.get(match[0].lower(), match[0].lower())
            before = source[:match.start()].rstrip(" ¡¿“‘(")
            if not before or before[-1] in ".!?":
                word = word[0].upper() + word[1:]
            source = source[:match.start()] + word + source[match.end():]
        recased.append((reference, source, target))
    return recased


def _length_gap(rows: dict[int, tuple[int, int]], verses, shift: int, missing: int) -> float:
    """Mean |log| ratio of the word counts of Spanish verse v and English verse v + shift
    over the `verses` with text on both sides; infinite when more than `missing` of
    them have no v + shift."""
    compared = [verse for verse in verses if all(rows[verse])]
    gaps = [
        abs(math.log((rows[verse + shift][1] + 1) / (rows[verse][0] + 1)))
        for verse in compared
        if verse + shift in rows
    ]
    return sum(gaps) / len(gaps) if gaps and len(gaps) >= len(compared) - missing else math.inf


def _shifted(rows, verses, min_gap: float, factor: float, missing: int) -> bool:
    """Whether `verses` match badly (mean gap at least `min_gap`) and a shift of one side by
    1 to 3 verses makes the gap `factor` times smaller or less."""
    gap = _length_gap(rows, verses, 0, 0)
    if gap < min_gap:
        return False
    return min(_length_gap(rows, verses, shift, missing) for shift in SHIFTS) < factor * gap


def misnumbered_verses(pairs) -> tuple[set[str], set[tuple[str, str]]]:
    """Returns the references of the verses the two modules number differently, and the
    chapters left out whole.

    The Reina-Valera module follows the Hebrew numbering in some places
    (Numbers 13:1 is the English 12:16, Jonah 2:1 the English 1:17, from
    1 Chronicles 21:16 on one verse is split differently). There the length of
    verse v on one side matches verse v + 1 (or v - 3) on the other better than
    verse v. With the gap the mean |log| ratio of the word counts: a chapter of
    at least MIN_CHAPTER verses whose gap is CHAPTER_GAP or more and shrinks by
    a fifth when one side is shifted goes whole; so does any run of WINDOW
    verses whose gap is WINDOW_GAP or more and shrinks by 40% when shifted.
    """
    chapters: dict[tuple[str, str], dict[int, tuple[int, int]]] = collections.defaultdict(dict)
    for reference, source, target in pairs:
        match = _KEY.fullmatch(reference)
        chapter = chapters[match["book"], match["chapter"]]
        chapter[int(match["verse"])] = (len(source.split()), len(target.split()))
    whole, flagged = set(), set()
    for (book, number), rows in chapters.items():
        verses = sorted(rows)
        if len(verses) >= MIN_CHAPTER and _shifted(rows, verses, CHAPTER_GAP, 0.8, 3):
            whole.add((book, number))
            flagged.update(f"{book} {number}:{verse}" for verse in verses)
            continue
        for start in range(max(len(verses) - WINDOW + 1, 1)):
            window = verses[start:start + WINDOW]
            if _shifted(rows, window, WINDOW_GAP, 0.6, 1):
                flagged.update(f"{book} {number}:{verse}" for verse in window)
    return flagged, whole


def drop_misaligned(pairs):
    """Leaves out misnumbered verses, empty verses and pairs whose word counts differ more
    than MAX_RATIO times."""
    flagged, whole = misnumbered_verses(pairs)
    kept, empty, ratio_drops = [], 0, 0
    for reference, source, target in pairs:
        ratio = (len(target.split()) + 1) / (len(source.split()) + 1)
        if reference in flagged:
            continue
        if not source or not target:
            empty += 1
        elif not 1 / MAX_RATIO <= ratio <= MAX_RATIO:
            ratio_drops += 1
        else:
            kept.append((reference, source, target))
    print(f"left out {len(flagged)} verses numbered differently (whole chapters: "
          f"{', '.join(' '.join(key) for key in sorted(whole))}), {empty} empty on one side"
          f" and {ratio_drops} whose lengths differ more than {MAX_RATIO} times")
    return kept


def write_splits(pairs, output: Path, share: float) -> dict[str, list]:
    """Writes train.tsv, valid.tsv and test.tsv into `output`; returns the pairs of each."""
    splits: dict[str, list] = {"train": [], "valid": [], "test": []}
    for reference, source, target in pairs:
        splits[split_of(reference, share)].append((source, target))
    output.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        with open(output / f"{name}.tsv", "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(f"{source}\t{target}\n" for source, target in rows)
    return splits


def _mean_words(texts) -> float:
    texts = list(texts)
    return sum(len(text.split()) for text in texts) / max(len(texts), 1)


def build(args: argparse.Namespace) -> None:
    """Reads both modules, writes the splits and prints what it did."""
    start = time.perf_counter()
    if args.spanish_imp or args.english_imp:
        if not (args.spanish_imp and args.english_imp):
            raise CorpusError("--spanish-imp and --english-imp go together")
        texts = [read_imp_file(args.spanish_imp), read_imp_file(args.english_imp)]
    else:
        texts = [run_mod2imp(SPANISH_MODULE), run_mod2imp(ENGLISH_MODULE)]
    (spanish, skipped_es), (english, skipped_en) = (parse_imp(text) for text in texts)
    if args.list_tags:
        for language, verses in (("Spanish", spanish), ("English", english)):
            print(f"{language} verses:\n  " + "\n  ".join(tag_inventory(verses.values())))
        return
    for language, skipped in (("Spanish", skipped_es), ("English", skipped_en)):
        print(f"{language}: skipped {sum(skipped.values())} entries "
              f"({skipped['heading']} headings, {skipped['verse 0']} verse-0 introductions)")
    unknown: collections.Counter = collections.Counter()
    pairs, unpaired = pair_verses(spanish, english, unknown)
    if unknown:
        print("unknown tags, text kept: " + ", ".join(f"{n} ({c})" for n, c in unknown.items()))
    print(f"{len(pairs)} verses in both; {unpaired['only in Spanish']} only in Spanish, "
          f"{unpaired['only in English']} only in English")
    pairs = recase_chapter_openings(drop_misaligned(drop_colophons(pairs)))
    splits = write_splits(pairs, args.output, args.share)
    for name, rows in splits.items():
        print(f"{name}.tsv: {len(rows)} pairs, mean words {_mean_words(s for s, _ in rows):.1f} "
              f"Spanish / {_mean_words(t for _, t in rows):.1f} English")
    print(f"wrote {args.output} in {time.perf_counter() - start:.1f} s")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path,
                        help="directory for train.tsv, valid.tsv and test.tsv")
    parser.add_argument("--spanish-imp", type=Path,
                        help="read the Spanish side from this mod2imp output instead of mod2imp")
    parser.add_argument("--english-imp", type=Path,
                        help="read the English side from this mod2imp output instead of mod2imp")
    parser.add_argument("--list-tags", action="store_true",
                        help="only list the OSIS elements in the verses and how each is treated")
    parser.add_argument("--share", type=float, default=0.04,
                        help="fraction of the verses in each of valid and test (default 0.04)")
    args = parser.parse_args(argv)
    if args.output is None and not args.list_tags:
        parser.error("the following arguments are required: --output")
    if not 0 < args.share < 0.5:
        parser.error(f"--share must be between 0 and 0.5, got {args.share}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        build(args)
    except CorpusError as exc:
        print(f"bible_corpus.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
