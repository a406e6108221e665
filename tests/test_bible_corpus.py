"""bench/bible_corpus.py on hand-written mod2imp output: OSIS stripping, pairing,
the hash split and the message when the SWORD tools are missing."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "bible_corpus.py"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bible"
INSTALL = "apt-get update && apt-get install -y sword-text-sparv sword-text-web libsword-utils"

_spec = importlib.util.spec_from_file_location("bible_corpus", SCRIPT)
corpus = importlib.util.module_from_spec(_spec)
sys.modules["bible_corpus"] = corpus
_spec.loader.exec_module(corpus)

SPANISH = {
    # <w> elements with Strong's numbers, separated by spaces.
    "Genesis 1:1": "EN el principio crió Dios los cielos y la tierra.",
    # Touching </w><transChange>, an added enclitic, entities and a tab.
    "Genesis 1:2": "hay allí también bdelio y preguntándole, Dios (dijo) & <sí> fin.",
    "Genesis 1:3": "Y dijo Dios: Sea la luz.",
    "Psalms 3:1": "Salmo de David. ¡OH Jehová!",
    "Psalms 3:2": "Muchos dicen de mi vida:",
}
ENGLISH = {
    # A footnote with nested tags between two touching <w> elements.
    "Genesis 1:1": "In the beginning, God created the heavens and the earth.",
    # A heading, a cross-reference and a footnote before a comma go.
    "Genesis 1:2": "There is bdellium and asked, God (he said) & <yes>",
    # </q><w> and poetry-line milestones separate words.
    "Genesis 1:3": "God said, “Let there be light.” Then it was so. Truly.",
    # The canonical psalm title stays; the speaker label and the note go.
    "Psalms 3:1": "A Psalm by David. Yahweh!",
    # The end of the book ends the verse (a glossary follows it).
    "Psalms 3:2": "Many there are who say of my soul,",
}


def _texts():
    spanish, _ = corpus.parse_imp((FIXTURES / "spa.imp").read_text(encoding="utf-8"))
    english, _ = corpus.parse_imp((FIXTURES / "eng.imp").read_text(encoding="utf-8"))
    return spanish, english


def test_parse_skips_headings_and_verse_zero():
    spanish, skipped = corpus.parse_imp((FIXTURES / "spa.imp").read_text(encoding="utf-8"))
    assert list(spanish) == list(SPANISH)
    assert skipped == {"heading": 1, "verse 0": 2}
    english, skipped = corpus.parse_imp((FIXTURES / "eng.imp").read_text(encoding="utf-8"))
    assert list(english) == [*ENGLISH][:3] + ["Genesis 1:4"] + [*ENGLISH][3:]
    assert skipped == {"heading": 2, "verse 0": 2}


@pytest.mark.parametrize("side", ["spanish", "english"])
def test_strip_gives_the_exact_verse_text(side):
    spanish, english = _texts()
    markup, expected = (spanish, SPANISH) if side == "spanish" else (english, ENGLISH)
    unknown = {}
    assert {ref: corpus.strip_osis(markup[ref], unknown) for ref in expected} == expected
    assert not unknown


def test_tag_inventory_names_each_treatment():
    _, english = _texts()
    lines = corpus.tag_inventory([*english.values(), "<foo>bar</foo>"])
    assert "note\t4\tdropped with its text" in lines
    assert "w\t23\ttags dropped, text kept" in lines
    assert "l\t3\tword boundary" in lines
    assert lines[-1] == "foo\t1\tUNKNOWN: word boundary, text kept"


def test_pairs_only_verses_in_both():
    spanish, english = _texts()
    pairs, unpaired = corpus.pair_verses(spanish, english)
    assert [ref for ref, _, _ in pairs] == list(SPANISH)
    assert unpaired == {"only in Spanish": 0, "only in English": 1}


def test_colophons_go_from_the_last_verse_of_a_book_only():
    pairs = [
        ("Philippians 4:22", "Os saludan todos. Amén. Escrita de veras.", "x"),
        ("Philippians 4:23", "La gracia sea con todos. Amén. Escrita de Roma con Epafrodito.", "x"),
        ("Colossians 1:1", "Pablo, apóstol. Amén. Enviada con Tichîco.", "x"),
    ]
    assert [source for _, source, _ in corpus.drop_colophons(pairs)] == [
        "Os saludan todos. Amén. Escrita de veras.",
        "La gracia sea con todos. Amén.",
        "Pablo, apóstol. Amén.",
    ]


def test_chapter_openings_in_capitals_take_their_usual_case():
    pairs = [
        ("Genesis 1:1", "EN el principio crió Dios los cielos.", "x"),
        ("Genesis 1:2", "Y en el día dijo Jehová: Sea.", "x"),
        ("Genesis 2:1", "Y JEHOVÁ dijo: NO. Y FUERON acabados.", "x"),
        ("Genesis 3:1", "Salmo de David. ¡OH Jehová!", "x"),
        ("Genesis 3:2", "Y FUERON acabados.", "x"),
    ]
    assert [source for _, source, _ in corpus.recase_chapter_openings(pairs)] == [
        "En el principio crió Dios los cielos.",
        "Y en el día dijo Jehová: Sea.",
        "Y Jehová dijo: NO. Y FUERON acabados.",
        "Salmo de David. ¡Oh Jehová!",
        "Y FUERON acabados.",
    ]


def test_verses_numbered_apart_are_left_out():
    lengths = [3, 20, 5, 30, 4, 25, 6, 18, 3, 22, 5, 28]
    aligned = [(f"Job 1:{v + 1}", "x " * n, "y " * n) for v, n in enumerate(lengths)]
    # Job 2 is one verse apart throughout; Job 3 from verse 13 on.
    shifted = [(f"Job 2:{v + 1}", "x " * n, "y " * m)
               for v, (n, m) in enumerate(zip(lengths, [9, *lengths[:-1]], strict=True))]
    tail = [(f"Job 3:{v + 1}", "x " * n, "y " * n) for v, n in enumerate(lengths)]
    tail += [(f"Job 3:{v + 13}", "x " * n, "y " * m)
             for v, (n, m) in enumerate(zip(lengths, [9, *lengths[:-1]], strict=True))]
    flagged, whole = corpus.misnumbered_verses(aligned + shifted + tail)
    assert whole == {("Job", "2")}
    # Runs of six verses are checked, so a few aligned verses next to the shift go too.
    assert {ref for ref in flagged if ref.startswith("Job 3:")} == {
        f"Job 3:{v}" for v in range(10, 25)}
    assert len(corpus.drop_misaligned(aligned + shifted + tail)) == 12 + 9


def _run(args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, env=env, check=False)


def test_split_is_by_reference_hash_and_reproducible(tmp_path):
    imp = ["--spanish-imp", FIXTURES / "spa.imp", "--english-imp", FIXTURES / "eng.imp"]
    for name in ("a", "b"):
        result = _run([*imp, "--share", "0.25", "--output", tmp_path / name])
        assert result.returncode == 0, result.stderr
    assert "skipped 3 entries (1 headings, 2 verse-0 introductions)" in result.stdout
    files = {}
    for split in ("train", "valid", "test"):
        files[split] = (tmp_path / "a" / f"{split}.tsv").read_bytes()
        assert files[split] == (tmp_path / "b" / f"{split}.tsv").read_bytes()
    rows = {split: data.decode("utf-8").splitlines() for split, data in files.items()}
    assert rows["valid"] == ["En el principio crió Dios los cielos y la tierra.\t"
                             + ENGLISH["Genesis 1:1"]]
    assert rows["test"] == [f"Salmo de David. ¡Oh Jehová!\t{ENGLISH['Psalms 3:1']}",
                            f"{SPANISH['Psalms 3:2']}\t{ENGLISH['Psalms 3:2']}"]
    assert len(rows["train"]) == 2
    assert all(line.count("\t") == 1 for lines in rows.values() for line in lines)
    assert corpus.split_of("Genesis 1:1", 0.25) == "valid"
    assert corpus.split_of("Genesis 1:1", 0.04) == "train"


def test_missing_mod2imp_names_the_packages(tmp_path):
    result = _run(["--output", tmp_path / "out"], env={**os.environ, "PATH": str(tmp_path)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"bible_corpus.py: error: mod2imp not found; install the SWORD tools and modules "
        f"with: {INSTALL}"
    ]
    assert not (tmp_path / "out").exists()


def _fake_mod2imp(directory: Path, modules: dict[str, Path]) -> None:
    """Writes a `mod2imp` that prints the given files and fails like it for other modules."""
    cases = "".join(f"    {name}) cat '{path}' ;;\n" for name, path in modules.items())
    script = directory / "mod2imp"
    script.write_text(
        "#!/bin/sh\ncase \"$1\" in\n" + cases
        + "    *) echo \"mod2imp: Couldn't find module: $1\" >&2; exit 255 ;;\nesac\n"
    )
    script.chmod(0o755)


@pytest.mark.skipif(os.name != "posix", reason="the fake mod2imp is a shell script")
def test_runs_mod2imp_and_names_a_missing_module(tmp_path):
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}/bin{os.pathsep}/usr/bin"}
    _fake_mod2imp(tmp_path, {"spaRV1909eb": FIXTURES / "spa.imp",
                             "engWEB2015eb": FIXTURES / "eng.imp"})
    result = _run(["--output", tmp_path / "out"], env=env)
    assert result.returncode == 0, result.stderr
    assert "5 verses in both; 0 only in Spanish, 1 only in English" in result.stdout
    assert sum(len((tmp_path / "out" / f"{s}.tsv").read_text().splitlines())
               for s in ("train", "valid", "test")) == 5
    _fake_mod2imp(tmp_path, {"spaRV1909eb": FIXTURES / "spa.imp"})
    result = _run(["--output", tmp_path / "out2"], env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"bible_corpus.py: error: mod2imp could not read the SWORD module engWEB2015eb; "
        f"install it with: {INSTALL}"
    ]
