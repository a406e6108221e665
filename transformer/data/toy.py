"""A generated toy Portuguese-to-English corpus: the offline default.

The tutorial trains on TED talks (`ted_hrlr_translate/pt_to_en`), which cannot
be downloaded on every machine. This module generates a corpus from a small,
deterministic grammar instead. It is small enough that a 2-layer Transformer
learns it in minutes on a CPU, and it still needs what attention is for:

- **Reordering.** Adjectives follow the noun in Portuguese and precede it in
  English ("o gato preto" -> "the black cat"); the possessor moves from the end
  to the front ("o livro do menino" -> "the boy's book", "o carro vermelho do
  homem velho" -> "the old man's red car").
- **Agreement that English drops.** Articles, adjectives and the number two
  agree in gender and number ("a casa branca", "os gatos pretos", "duas
  mesas"), English has one form ("the white house", "the black cats", "two
  tables"); English keeps only the verb's number ("eats"/"eat") and chooses
  "a" or "an" from the next word ("an old cat", "an apple").
- **Negation built differently.** "não come" -> "does not eat", "não comem"
  -> "do not eat".
- **Contractions.** Prepositions merge with articles: "de" + "o" = "do",
  "em" + "a" = "na", "em" + "um" = "num"; "em cima da mesa" -> "on the table".
- **Numbers.** "dois gatos" -> "two cats", "as três bolas" -> "the three balls".

Every Portuguese sentence has exactly one English translation: there are no
synonyms and no free choices, so a model can reach an exact match. Sentences
have 3 to 15 Portuguese words; the grammar can produce many millions of
distinct sentences (see `count_toy_sentences`). The vocabulary is about 100
Portuguese and 70 English words.

Run it to look at the corpus:

```
python -m transformer.data.toy --sample 10 --seed 0
python -m transformer.data.toy --write toy.tsv
```
"""

from __future__ import annotations

import dataclasses
import logging
import random

from transformer._validation import check_non_negative_int, check_positive_int
from transformer.data.corpus import Corpus, DataError, Pair
from transformer.data.tsv import write_tsv

logger = logging.getLogger(__name__)

# Longest and shortest Portuguese sentence, in words.
MIN_WORDS = 3
MAX_WORDS = 15


@dataclasses.dataclass(frozen=True)
class Noun:
    """A noun with its gender, its plural and what it can be used for."""

    pt: str
    pt_plural: str
    gender: str  # "m" or "f"
    en: str
    en_plural: str
    kind: str  # "person", "animal", "thing" or "food"


@dataclasses.dataclass(frozen=True)
class Adjective:
    """An adjective in its four Portuguese forms (m/f x singular/plural) and in English."""

    masculine: str
    feminine: str
    masculine_plural: str
    feminine_plural: str
    en: str
    kinds: tuple[str, ...]  # the noun kinds it describes

    def form(self, gender: str, plural: bool) -> str:
        """Returns the Portuguese form that agrees with a noun of `gender` and number."""
        if gender == "m":
            return self.masculine_plural if plural else self.masculine
        return self.feminine_plural if plural else self.feminine


@dataclasses.dataclass(frozen=True)
class Verb:
    """A verb in the present tense, 3rd person, with the objects it accepts.

    `objects` is `None` for an intransitive verb, else the noun kinds it takes.
    `takes_de` marks verbs whose object follows the preposition "de" ("gosta de").
    """

    pt: str
    pt_plural: str
    en: str
    en_base: str
    objects: tuple[str, ...] | None
    takes_de: bool = False


NOUNS = (
    Noun("menino", "meninos", "m", "boy", "boys", "person"),
    Noun("homem", "homens", "m", "man", "men", "person"),
    Noun("menina", "meninas", "f", "girl", "girls", "person"),
    Noun("mulher", "mulheres", "f", "woman", "women", "person"),
    Noun("gato", "gatos", "m", "cat", "cats", "animal"),
    Noun("cão", "cães", "m", "dog", "dogs", "animal"),
    Noun("cavalo", "cavalos", "m", "horse", "horses", "animal"),
    Noun("livro", "livros", "m", "book", "books", "thing"),
    Noun("carro", "carros", "m", "car", "cars", "thing"),
    Noun("bola", "bolas", "f", "ball", "balls", "thing"),
    Noun("casa", "casas", "f", "house", "houses", "thing"),
    Noun("mesa", "mesas", "f", "table", "tables", "thing"),
    Noun("maçã", "maçãs", "f", "apple", "apples", "food"),
    Noun("bolo", "bolos", "m", "cake", "cakes", "food"),
    Noun("ovo", "ovos", "m", "egg", "eggs", "food"),
)

_ANY = ("person", "animal", "thing", "food")
ADJECTIVES = (
    Adjective("preto", "preta", "pretos", "pretas", "black", ("animal", "thing")),
    Adjective("branco", "branca", "brancos", "brancas", "white", ("animal", "thing")),
    Adjective("vermelho", "vermelha", "vermelhos", "vermelhas", "red", ("thing", "food")),
    Adjective("novo", "nova", "novos", "novas", "new", ("thing",)),
    Adjective("velho", "velha", "velhos", "velhas", "old", ("person", "animal", "thing")),
    Adjective("pequeno", "pequena", "pequenos", "pequenas", "small", _ANY),
    Adjective("grande", "grande", "grandes", "grandes", "big", _ANY),
)

VERBS = (
    Verb("come", "comem", "eats", "eat", ("food",)),
    Verb("vê", "veem", "sees", "see", _ANY),
    Verb("quer", "querem", "wants", "want", ("animal", "thing", "food")),
    Verb("compra", "compram", "buys", "buy", ("animal", "thing", "food")),
    Verb("encontra", "encontram", "finds", "find", _ANY),
    Verb("gosta", "gostam", "likes", "like", _ANY, takes_de=True),
    Verb("dorme", "dormem", "sleeps", "sleep", None),
    Verb("corre", "correm", "runs", "run", None),
)

# Numbers: Portuguese masculine and feminine forms, English.
NUMBERS = {
    2: ("dois", "duas", "two"),
    3: ("três", "três", "three"),
    4: ("quatro", "quatro", "four"),
    5: ("cinco", "cinco", "five"),
}

# Prepositional phrases at the end of a sentence: Portuguese words before the
# noun phrase, the preposition the article contracts with, English, and the
# nouns allowed after it.
PREPOSITIONS = {
    "in": ((), "em", "in", ("casa", "carro")),
    "on": (("em", "cima"), "de", "on", ("mesa", "carro", "casa")),
    "under": (("debaixo",), "de", "under", ("mesa", "carro")),
    "near": (("perto",), "de", "near", tuple(n.pt for n in NOUNS)),
    "with": (("com",), None, "with", tuple(n.pt for n in NOUNS if n.kind in ("person", "animal"))),
}

# Articles: (definite, indefinite) x gender x number, and their contractions.
_DEFINITE = {("m", False): "o", ("f", False): "a", ("m", True): "os", ("f", True): "as"}
_INDEFINITE = {"m": "um", "f": "uma"}
_CONTRACTIONS = {
    "de": {"o": "do", "a": "da", "os": "dos", "as": "das"},
    "em": {"o": "no", "a": "na", "os": "nos", "as": "nas", "um": "num", "uma": "numa"},
}
_NOUN_BY_PT = {n.pt: n for n in NOUNS}
_SUBJECTS = tuple(n for n in NOUNS if n.kind in ("person", "animal"))
_OWNERS = tuple(n for n in NOUNS if n.kind == "person")


def _adjectives_for(noun: Noun) -> tuple[Adjective, ...]:
    return tuple(a for a in ADJECTIVES if noun.kind in a.kinds)


@dataclasses.dataclass(frozen=True)
class NounPhrase:
    """A noun phrase before it is written out in either language.

    `determiner` is "the" (o/a/os/as), "a" (um/uma, singular only), "number"
    (dois/duas..., plural only) or "the number" (os dois..., plural only).
    A `possessor` ("do menino") is a person and needs the definite determiner;
    people themselves have no possessor.
    """

    noun: Noun
    plural: bool
    determiner: str
    number: int | None = None
    adjective: Adjective | None = None
    possessor: NounPhrase | None = None


def _portuguese_np(phrase: NounPhrase, preposition: str | None = None) -> list[str]:
    """Writes a noun phrase in Portuguese, contracting its article with `preposition`."""
    noun = phrase.noun
    if phrase.determiner in ("the", "the number"):
        article = _DEFINITE[(noun.gender, phrase.plural)]
    elif phrase.determiner == "a":
        article = _INDEFINITE[noun.gender]
    else:
        article = None
    words = []
    if (
        article is not None
        and preposition in _CONTRACTIONS
        and article in _CONTRACTIONS[preposition]
    ):
        words.append(_CONTRACTIONS[preposition][article])
    else:
        if preposition is not None:
            words.append(preposition)
        if article is not None:
            words.append(article)
    if phrase.number is not None:
        masculine, feminine, _ = NUMBERS[phrase.number]
        words.append(masculine if noun.gender == "m" else feminine)
    words.append(noun.pt_plural if phrase.plural else noun.pt)
    if phrase.adjective is not None:
        words.append(phrase.adjective.form(noun.gender, phrase.plural))
    if phrase.possessor is not None:
        words.extend(_portuguese_np(phrase.possessor, "de"))
    return words


def _english_np(phrase: NounPhrase) -> list[str]:
    """Writes a noun phrase in English: possessor first, adjective before the noun."""
    noun = phrase.noun
    rest = []
    if phrase.number is not None:
        rest.append(NUMBERS[phrase.number][2])
    if phrase.adjective is not None:
        rest.append(phrase.adjective.en)
    rest.append(noun.en_plural if phrase.plural else noun.en)
    if phrase.possessor is not None:
        # "the boy's book", "the boys' books", "the men's books".
        owner = _english_np(phrase.possessor)
        owner[-1] += "'" if owner[-1].endswith("s") else "'s"
        return owner + rest
    if phrase.determiner in ("the", "the number"):
        return ["the"] + rest
    if phrase.determiner == "a":
        return ["an" if rest[0][0] in "aeiou" else "a"] + rest
    return rest


class _Sampler:
    """Draws random sentences from the grammar with a `random.Random`."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def noun_phrase(self, nouns, allow_possessor=True) -> NounPhrase:
        rng = self.rng
        noun = rng.choice(nouns)
        plural = rng.random() < 0.45
        number = None
        if plural:
            determiner = rng.choices(("the", "number", "the number"), (0.5, 0.3, 0.2))[0]
            if determiner != "the":
                number = rng.choice(tuple(NUMBERS))
        else:
            determiner = "the" if rng.random() < 0.65 else "a"
        adjective = rng.choice(_adjectives_for(noun)) if rng.random() < 0.4 else None
        possessor = None
        if allow_possessor and noun.kind != "person" and determiner == "the":
            if rng.random() < 0.3:
                owner = rng.choice(_OWNERS)
                possessor = NounPhrase(
                    noun=owner,
                    plural=rng.random() < 0.4,
                    determiner="the",
                    adjective=rng.choice(_adjectives_for(owner)) if rng.random() < 0.3 else None,
                )
        return NounPhrase(noun, plural, determiner, number, adjective, possessor)

    def sentence(self) -> Pair:
        rng = self.rng
        subjects = [self.noun_phrase(_SUBJECTS)]
        if rng.random() < 0.15:
            subjects.append(self.noun_phrase(_SUBJECTS))
        plural_subject = len(subjects) > 1 or subjects[0].plural
        negated = rng.random() < 0.3
        verb = rng.choice(VERBS)

        pt = list(_portuguese_np(subjects[0]))
        en = list(_english_np(subjects[0]))
        if len(subjects) > 1:
            pt += ["e"] + _portuguese_np(subjects[1])
            en += ["and"] + _english_np(subjects[1])
        if negated:
            pt.append("não")
            en += ["do" if plural_subject else "does", "not", verb.en_base]
        else:
            en.append(verb.en_base if plural_subject else verb.en)
        pt.append(verb.pt_plural if plural_subject else verb.pt)

        if verb.objects is not None:
            obj = self.noun_phrase([n for n in NOUNS if n.kind in verb.objects])
            pt += _portuguese_np(obj, "de" if verb.takes_de else None)
            en += _english_np(obj)
        if rng.random() < 0.35:
            words, contracts_with, english, allowed = PREPOSITIONS[rng.choice(tuple(PREPOSITIONS))]
            phrase = self.noun_phrase(
                [_NOUN_BY_PT[name] for name in allowed], allow_possessor=False
            )
            pt += list(words) + _portuguese_np(phrase, contracts_with)
            en += [english] + _english_np(phrase)
        return " ".join(pt), " ".join(en)


def sample_toy_pairs(n: int, seed: int = 0) -> list[Pair]:
    """Draws `n` random (Portuguese, English) pairs from the grammar, repeats allowed.

    Args:
        n: how many pairs to draw.
        seed: the random seed; the same seed gives the same pairs.

    Returns:
        A list of `n` `(portuguese, english)` string pairs of 3 to 15
        Portuguese words each.

    Example:

    >>> sample_toy_pairs(1, seed=3)  # doctest: +SKIP
    [('a menina não come o ovo', 'the girl does not eat the egg')]
    """
    check_positive_int("n", n)
    sampler = _Sampler(random.Random(seed))
    pairs = []
    while len(pairs) < n:
        pair = sampler.sentence()
        if MIN_WORDS <= len(pair[0].split()) <= MAX_WORDS:
            pairs.append(pair)
    return pairs


def generate_toy_corpus(
    seed: int = 0, n_train: int = 20000, n_valid: int = 1000, n_test: int = 1000
) -> Corpus:
    """Generates the toy Portuguese-to-English corpus, deterministically for a seed.

    The three splits never share a Portuguese sentence. They are drawn from
    one random stream in the order test, validation, train, so the test split
    for a seed does not change when `n_train` or `n_valid` does.

    Args:
        seed: the random seed; the same seed and sizes give the same corpus.
        n_train: number of distinct training pairs.
        n_valid: number of distinct validation pairs.
        n_test: number of distinct test pairs.

    Returns:
        A `Corpus` of `(portuguese, english)` pairs.

    Example:

    >>> corpus = generate_toy_corpus(seed=0, n_train=100, n_valid=10, n_test=10)
    >>> corpus.sizes()
    {'train': 100, 'valid': 10, 'test': 10}
    """
    for name, value in (("n_train", n_train), ("n_valid", n_valid), ("n_test", n_test)):
        check_non_negative_int(name, value)
    total = n_train + n_valid + n_test
    sampler = _Sampler(random.Random(seed))
    seen: set[str] = set()
    pairs: list[Pair] = []
    # Far more sentences are possible than anyone asks for, so duplicates are
    # rare; the bound only stops a runaway loop.
    max_draws = 50 * total + 1000
    draws = 0
    while len(pairs) < total:
        draws += 1
        if draws > max_draws:
            raise DataError(
                f"Could not draw {total} distinct toy sentences (got {len(pairs)}); "
                "ask for fewer pairs."
            )
        source, target = sampler.sentence()
        if source in seen or not MIN_WORDS <= len(source.split()) <= MAX_WORDS:
            continue
        seen.add(source)
        pairs.append((source, target))
    test = pairs[:n_test]
    valid = pairs[n_test : n_test + n_valid]
    train = pairs[n_test + n_valid :]
    logger.info(
        "Generated the toy corpus (seed=%d): %d/%d/%d pairs.", seed, n_train, n_valid, n_test
    )
    return Corpus(train=train, valid=valid, test=test, name=f"toy(seed={seed})")


def toy_vocabulary() -> tuple[list[str], list[str]]:
    """Returns every Portuguese and every English word the grammar can produce, sorted."""
    pt = {"e", "não", "em", "cima", "debaixo", "perto", "com", "de"}
    en = {"and", "does", "do", "not", "the", "a", "an", "in", "on", "under", "near", "with"}
    for noun in NOUNS:
        pt |= {noun.pt, noun.pt_plural}
        en |= {noun.en, noun.en_plural}
    for adjective in ADJECTIVES:
        pt |= {adjective.masculine, adjective.feminine}
        pt |= {adjective.masculine_plural, adjective.feminine_plural}
        en.add(adjective.en)
    for verb in VERBS:
        pt |= {verb.pt, verb.pt_plural}
        en |= {verb.en, verb.en_base}
    for masculine, feminine, english in NUMBERS.values():
        pt |= {masculine, feminine}
        en.add(english)
    pt |= set(_DEFINITE.values()) | set(_INDEFINITE.values())
    for table in _CONTRACTIONS.values():
        pt |= set(table.values())
    return sorted(pt), sorted(en)


def _all_noun_phrases(nouns, allow_possessor: bool):
    """Yields every noun phrase `_Sampler.noun_phrase` can draw from `nouns`."""
    owners = [
        NounPhrase(owner, plural, "the", adjective=adjective)
        for owner in _OWNERS
        for plural in (False, True)
        for adjective in (None, *_adjectives_for(owner))
    ]
    for noun in nouns:
        possessors = (None, *owners) if allow_possessor and noun.kind != "person" else (None,)
        for adjective in (None, *_adjectives_for(noun)):
            for plural in (False, True):
                for possessor in possessors:
                    yield NounPhrase(noun, plural, "the", None, adjective, possessor)
            yield NounPhrase(noun, False, "a", None, adjective)
            for number in NUMBERS:
                yield NounPhrase(noun, True, "number", number, adjective)
                yield NounPhrase(noun, True, "the number", number, adjective)


def count_toy_sentences() -> int:
    """Counts the distinct Portuguese sentences of 3 to 15 words the grammar can produce.

    Every noun phrase is written out once to learn its length; sentences are
    then counted by combining the length distributions of their parts, without
    enumerating them. (Different choices never give the same sentence; the
    tests check this on samples.)

    Returns:
        The number of distinct sentences, in the tens of millions.
    """

    def lengths(nouns, allow_possessor: bool, preposition: str | None) -> dict[int, int]:
        counts: dict[int, int] = {}
        for phrase in _all_noun_phrases(nouns, allow_possessor):
            length = len(_portuguese_np(phrase, preposition))
            counts[length] = counts.get(length, 0) + 1
        return counts

    def combine(*parts: dict[int, int]) -> dict[int, int]:
        out = {0: 1}
        for part in parts:
            new: dict[int, int] = {}
            for la, na in out.items():
                for lb, nb in part.items():
                    new[la + lb] = new.get(la + lb, 0) + na * nb
            out = new
        return out

    def union(*parts: dict[int, int]) -> dict[int, int]:
        out: dict[int, int] = {}
        for part in parts:
            for length, n in part.items():
                out[length] = out.get(length, 0) + n
        return out

    subject = lengths(_SUBJECTS, True, None)
    subjects = union(subject, combine(subject, {1: 1}, subject))  # "... e ..."
    predicates = []
    for verb in VERBS:
        if verb.objects is None:
            obj = {0: 1}
        else:
            nouns = [n for n in NOUNS if n.kind in verb.objects]
            obj = lengths(nouns, True, "de" if verb.takes_de else None)
        predicates.append(combine({1: 1, 2: 1}, obj))  # verb, with or without "não"
    endings = [{0: 1}]
    for words, contracts_with, _, allowed in PREPOSITIONS.values():
        nouns = [_NOUN_BY_PT[name] for name in allowed]
        endings.append(combine({len(words): 1}, lengths(nouns, False, contracts_with)))
    sentences = combine(subjects, union(*predicates), union(*endings))
    return sum(n for length, n in sentences.items() if MIN_WORDS <= length <= MAX_WORDS)


def main(argv: list[str] | None = None) -> int:
    """Command line: print a sample of the corpus or write it as TSV.

    Args:
        argv: the arguments, without the program name; `sys.argv[1:]` if None.

    Returns:
        The exit status: 0 on success, 2 on bad arguments.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m transformer.data.toy",
        description="Look at the generated toy Portuguese-English corpus.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--sample", type=int, metavar="N", help="print N random pairs")
    action.add_argument("--write", metavar="FILE.tsv", help="write the corpus as source<TAB>target")
    action.add_argument(
        "--count", action="store_true", help="print how many sentences are possible"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--n-train", type=int, default=20000)
    parser.add_argument("--n-valid", type=int, default=1000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument(
        "--split",
        choices=("all", "train", "valid", "test"),
        default="all",
        help="which split --write writes (default: all, in the order train, valid, test)",
    )
    args = parser.parse_args(argv)
    try:
        if args.count:
            sys.stdout.write(f"{count_toy_sentences():,}\n")
        elif args.sample is not None:
            for source, target in sample_toy_pairs(args.sample, seed=args.seed):
                sys.stdout.write(f"{source}\t->\t{target}\n")
        else:
            corpus = generate_toy_corpus(args.seed, args.n_train, args.n_valid, args.n_test)
            pairs = (
                corpus.train + corpus.valid + corpus.test
                if args.split == "all"
                else getattr(corpus, args.split)
            )
            write_tsv(pairs, args.write)
            sys.stderr.write(f"Wrote {len(pairs)} pairs to {args.write}\n")
    except (ValueError, OSError) as error:
        sys.stderr.write(f"error: {error}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
