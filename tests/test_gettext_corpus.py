"""bench/gettext_corpus.py on catalogs written by hand: the .mo reader, the rules that
turn entries into pairs (contexts, plurals, accelerators, untranslated entries,
line breaks, duplicates), the hash split, the .deb reader and a fake apt-get,
and the one-line errors. No network."""

from __future__ import annotations

import collections
import gettext
import importlib.util
import io
import json
import struct
import sys
import tarfile
from pathlib import Path

import pytest

# Paths in a .deb start with "./".
ROOT = "./"
SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "gettext_corpus.py"

_spec = importlib.util.spec_from_file_location("gettext_corpus", SCRIPT)
corpus = importlib.util.module_from_spec(_spec)
sys.modules["gettext_corpus"] = corpus
_spec.loader.exec_module(corpus)


def mo_bytes(entries, charset="UTF-8", order="<") -> bytes:
    """A compiled catalog (GNU .mo format) of {msgid: msgstr}, with a header entry."""
    entries = {"": f"Content-Type: text/plain; charset={charset}\n", **entries}
    keys = sorted(entries)
    ids = [key.encode(charset) for key in keys]
    strs = [entries[key].encode(charset) for key in keys]
    count = len(keys)
    ids_at = 28
    strs_at = ids_at + 8 * count
    data_at = strs_at + 8 * count
    table, blob = [], b""
    for text in ids + strs:
        table.append((len(text), data_at + len(blob)))
        blob += text + b"\0"
    header = struct.pack(order + "7I", 0x950412DE, 0, count, ids_at, strs_at, 0, data_at)
    return header + b"".join(struct.pack(order + "2I", *entry) for entry in table) + blob


GERMAN = {
    "_File": "_Datei",
    "Open %s…": "%s öffnen…",
    "menu\x04Quit": "Beenden",  # a context
    "%d file\x00%d files": "%d Datei\x00%d Dateien",  # a plural
    "Line one\nline\ttwo": "Zeile eins\nZeile\tzwei",
    "OK": "OK",  # untranslated
    "Cancel": "",  # empty
    "Save": "Speichern",
    "Hide %1": "Verbergen %1|/|Verbergen $[lowercase %1]",  # a KDE script
    "translator-credits": "Hans Müller",  # names
    "calendar:week_start:0": "calendar:week_start:1",  # a setting
    "%Y-%m-%d": "%d.%m.%Y",  # no words
}
GERMAN_PAIRS = [
    ("Datei", "File"),
    ("%s öffnen…", "Open %s…"),
    ("Beenden", "Quit"),
    ("%d Datei", "%d file"),
    ("Zeile eins Zeile zwei", "Line one line two"),
    ("Speichern", "Save"),
    ("Verbergen %1", "Hide %1"),
]


def test_mo_helper_writes_what_the_standard_library_reads():
    catalog = gettext.GNUTranslations(io.BytesIO(mo_bytes(GERMAN)))
    assert catalog.gettext("Save") == "Speichern"
    assert catalog.pgettext("menu", "Quit") == "Beenden"
    assert catalog.ngettext("%d file", "%d files", 2) == "%d Dateien"


@pytest.mark.parametrize("order", ["<", ">"])
def test_parse_mo_reads_both_byte_orders_and_the_charset(order):
    entries = corpus.parse_mo(mo_bytes({"Size": "Größe"}, "ISO-8859-1", order))
    assert entries[1] == ("Size", "Größe")
    assert entries[0][0] == ""


def test_parse_mo_rejects_other_files():
    with pytest.raises(ValueError):
        corpus.parse_mo(b"msgid \"\"\nmsgstr \"\"\n" * 3)


def test_entries_become_pairs_by_the_rules():
    skipped = collections.Counter()
    pairs = list(corpus.message_pairs(corpus.parse_mo(mo_bytes(GERMAN)), skipped))
    assert sorted(pairs) == sorted(GERMAN_PAIRS)
    assert skipped == {"untranslated": 1, "empty": 1, "credits": 1, "keys": 1, "no words": 1}


@pytest.mark.parametrize("english, translation, expected", [
    ("_File", "_Datei", ("File", "Datei")),
    ("Re_name", "Umbe_nennen", ("Rename", "Umbenennen")),
    ("&Open", "Ö&ffnen", ("Open", "Öffnen")),
    ("~Save", "~Speichern", ("Save", "Speichern")),
    ("_Open…", "開く(_O)…", ("Open…", "開く…")),
    ("Rotate &180°", "180°回転(&1)", ("Rotate 180°", "180°回転")),
    ("&Toggle Locks && Visibility", "Sperren && Sichtbarkeit &umschalten",
     ("Toggle Locks & Visibility", "Sperren & Sichtbarkeit umschalten")),
    ("_Quit", "Beenden", ("Quit", "Beenden")),  # no marker in the translation
    ("Download", "ダウンロード(&D)", ("Download", "ダウンロード")),  # none in the English
    # Not accelerators: an entity, a name in both, two markers, a path, none.
    ("Save &amp; Quit", "Speichern &amp; Beenden", None),
    ("file_name is %s", "file_name ist %s", None),
    ("_Fit to _Width", "_An _Breite anpassen", None),
    ("~/Documents", "~/Dokumente", None),
    ("%_H hour", "%_H Stunde", None),
    ("Plu&gins", "Plu&gins", ("Plugins", "Plugins")),
    ("Tom & Jerry", "Tom & Jerry", None),
])
def test_accelerators_go_from_both_sides(english, translation, expected):
    assert corpus.accelerators(english, translation) == (expected or (english, translation))


def test_catalog_language_from_the_folder():
    assert corpus.catalog_language("usr/share/locale/de/LC_MESSAGES/gtk30.mo") == "de"
    assert corpus.catalog_language(
        ROOT + "usr/lib/libreoffice/program/resource/pt-BR/LC_MESSAGES/sw.mo") == "pt_BR"
    assert corpus.catalog_language("usr/share/locale/de/LC_TIME/x.mo") is None
    assert corpus.catalog_language("usr/share/doc/de/x.mo") is None


def test_split_by_english_is_deterministic_and_near_the_share():
    strings = [f"message {index}" for index in range(4000)]
    splits = [corpus.split_of(text, 0.1) for text in strings]
    assert splits == [corpus.split_of(text, 0.1) for text in strings]
    assert 300 < splits.count("test") < 500 and 300 < splits.count("valid") < 500
    # The SHA-256 of the English string alone: these stay put from one build to the next.
    assert [(index, split) for index, split in enumerate(splits) if split != "train"][:3] == [
        (4, "valid"), (16, "test"), (17, "valid")]


def _write_mo(root: Path, folder: str, name: str, entries) -> None:
    path = root / folder / "LC_MESSAGES" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(mo_bytes(entries))


MANY = {f"Message number {index}": f"Nachricht Nummer {index}" for index in range(300)}


@pytest.fixture
def trees(tmp_path):
    """Two extracted packages: German in both (one catalog shared), Brazilian Portuguese
    in the LibreOffice layout, Swiss German that `de` must not take."""
    root = tmp_path / "trees"
    _write_mo(root / "pkg-a", "usr/share/locale/de", "a.mo", GERMAN)
    _write_mo(root / "pkg-a", "usr/share/locale/de_CH", "a.mo", {"Size": "Grösse"})
    _write_mo(root / "pkg-b", "usr/share/locale/de", "a.mo", GERMAN)  # the same pairs
    _write_mo(root / "pkg-b", "usr/share/locale/de", "b.mo", MANY)
    _write_mo(root / "pkg-b", "usr/lib/libreoffice/program/resource/pt-BR", "sw.mo",
              {"~Save": "~Salvar", "Save": "Salvar", "%d file\x00%d files": "%d arquivo\x00%d arquivos"})
    (root / "pkg-b" / "usr/share/locale/fr/LC_MESSAGES").mkdir(parents=True)
    (root / "pkg-b" / "usr/share/locale/fr/LC_MESSAGES/broken.mo").write_bytes(b"not a catalog")
    return root


def _read(folder: Path) -> dict[str, list[tuple[str, str]]]:
    return {name: [tuple(line.split("\t")) for line in
                   (folder / f"{name}.tsv").read_text(encoding="utf-8").splitlines()]
            for name in ("train", "valid", "test")}


def test_build_writes_each_language_and_the_manifest(trees, tmp_path, capsys):
    out = tmp_path / "out"
    assert corpus.main(["--output", str(out), "--trees", str(trees), "--mixed",
                        "--languages", "de", "pt-BR", "fr", "--share", "0.1"]) == 0
    german = _read(out / "de-en")
    pairs = [pair for rows in german.values() for pair in rows]
    assert sorted(pairs) == sorted(GERMAN_PAIRS + [(v, k) for k, v in MANY.items()])
    assert 10 < len(german["test"]) < 60 and 10 < len(german["valid"]) < 60
    for name, rows in german.items():
        assert all(corpus.split_of(english, 0.1) == name for _, english in rows)
    portuguese = sorted(pair for rows in _read(out / "pt_BR-en").values() for pair in rows)
    assert portuguese == [("%d arquivo", "%d file"), ("Salvar", "Save")]
    mixed = sorted(pair for rows in _read(out / "mul-en").values() for pair in rows)
    assert mixed == sorted(pairs + portuguese)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["pairs_by_package"] == {"pkg-a": {"de": 7}, "pkg-b": {"de": 307, "pt_BR": 3}}
    assert manifest["catalogs"]["unreadable catalogs"] == 1
    assert manifest["splits"]["de-en"] == {name: len(rows) for name, rows in german.items()}
    assert not (out / "fr-en").exists()
    printed = capsys.readouterr().out
    assert "de-en: 307 pairs" in printed and "no pairs for fr" in printed


def test_build_is_deterministic_and_no_english_string_is_in_two_splits(trees, tmp_path):
    # The same English with another translation must land in the same split.
    _write_mo(trees / "pkg-c", "usr/share/locale/de", "c.mo",
              {key: value + " (anders)" for key, value in MANY.items()})
    outputs = []
    for name in ("one", "two"):
        assert corpus.main(["--output", str(tmp_path / name), "--trees", str(trees),
                            "--languages", "de", "--share", "0.2"]) == 0
        outputs.append(_read(tmp_path / name / "de-en"))
    assert outputs[0] == outputs[1]
    english = {name: {pair[1] for pair in rows} for name, rows in outputs[0].items()}
    assert sum(len(rows) for rows in outputs[0].values()) == 607
    assert not english["train"] & english["valid"]
    assert not english["train"] & english["test"]
    assert not english["valid"] & english["test"]


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("gettext_corpus.py: error: ")
    return err


def test_output_folder_must_be_empty(trees, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.tsv").write_text("x\ty\n")
    assert corpus.main(["--output", str(out), "--trees", str(trees)]) == 1
    assert "is not an empty folder" in _error(capsys)


def test_no_pairs_is_an_error(trees, tmp_path, capsys):
    assert corpus.main(["--output", str(tmp_path / "out"), "--trees", str(trees),
                        "--languages", "xx"]) == 1
    assert "no pairs found: no catalog of xx" in _error(capsys)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- .deb files and apt-get -------------------------------------------------------------

def _tar(files: dict[str, bytes], compression: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def deb_bytes(package: str, version: str, files: dict[str, bytes]) -> bytes:
    """A .deb: an ar archive of debian-binary, control.tar.gz and data.tar.xz."""
    control = f"Package: {package}\nVersion: {version}\nArchitecture: all\n".encode()
    members = [("debian-binary", b"2.0\n"),
               ("control.tar.gz", _tar({ROOT + "control": control}, "gz")),
               ("data.tar.xz", _tar(files, "xz"))]
    out = b"!<arch>\n"
    for name, data in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return out


def test_deb_reader_finds_the_catalogs_and_the_version(tmp_path):
    deb = tmp_path / "x.deb"
    deb.write_bytes(deb_bytes("demo-l10n", "1:2.0-1", {
        ROOT + "usr/share/locale/de/LC_MESSAGES/demo.mo": mo_bytes(GERMAN),
        ROOT + "usr/share/locale/fr/LC_MESSAGES/demo.mo": mo_bytes({"Save": "Enregistrer"}),
        ROOT + "usr/share/doc/demo-l10n/copyright": b"free"}))
    assert corpus.deb_control(deb) == {"Package": "demo-l10n", "Version": "1:2.0-1",
                                       "Architecture": "all"}
    found = dict(corpus.catalogs_in_deb(deb, {"fr"}))
    assert list(found) == ["usr/share/locale/fr/LC_MESSAGES/demo.mo"]
    assert corpus.parse_mo(found["usr/share/locale/fr/LC_MESSAGES/demo.mo"])[1] == (
        "Save", "Enregistrer")


@pytest.fixture
def fake_apt(tmp_path, monkeypatch):
    """An apt-get on PATH that "downloads" the .deb files of a folder, and fails (before
    downloading anything, as apt does) when one package is unknown."""
    repo, bin_dir = tmp_path / "repo", tmp_path / "bin"
    repo.mkdir()
    bin_dir.mkdir()
    (repo / "good-l10n_1.0_all.deb").write_bytes(deb_bytes("good-l10n", "1.0", {
        ROOT + "usr/share/locale/de/LC_MESSAGES/good.mo": mo_bytes(MANY)}))
    script = bin_dir / "apt-get"
    script.write_text(f"""#!/bin/sh
shift  # download
for arg in "$@"; do case "$arg" in -o|APT::*) continue;; esac
  [ -e "{repo}/${{arg}}_1.0_all.deb" ] || {{ echo "E: Unable to locate package $arg"; exit 100; }}
done
n=0
for arg in "$@"; do case "$arg" in -o|APT::*) continue;; esac
  n=$((n+1)); echo "Get:$n http://deb.debian.org/debian bookworm/main all $arg all 1.0 [1 kB]"
  /bin/cp "{repo}/${{arg}}_1.0_all.deb" .; echo "$arg" >> "{tmp_path}/apt.log"
done
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return tmp_path / "apt.log"


def test_download_then_reuse_the_cache(fake_apt, tmp_path, capsys):
    args = ["--cache", str(tmp_path / "cache"), "--packages", "good-l10n", "--languages", "de"]
    assert corpus.main(["--output", str(tmp_path / "one"), *args]) == 0
    assert "download 1/1 good-l10n 1.0" in capsys.readouterr().out
    assert corpus.main(["--output", str(tmp_path / "two"), *args]) == 0
    assert "1 of 1 packages in" in capsys.readouterr().out
    assert fake_apt.read_text().split() == ["good-l10n"]  # downloaded once
    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["packages"][0]["Version"] == "1.0"
    assert manifest["packages"][0]["file"] == "good-l10n_1.0_all.deb"
    assert manifest["pairs_by_package"] == {"good-l10n": {"de": 300}}


def test_a_package_that_cannot_be_downloaded_is_named(fake_apt, tmp_path, capsys):
    assert corpus.main(["--output", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                        "--packages", "no-such-l10n", "good-l10n"]) == 1
    err = _error(capsys)
    assert "could not download 1 package(s): no-such-l10n (E: Unable to locate" in err
    assert "good-l10n" not in err
    assert list((tmp_path / "cache").glob("*.deb")) == [tmp_path / "cache" / "good-l10n_1.0_all.deb"]


def test_without_apt_get_the_error_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert corpus.main(["--output", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
                        "--packages", "good-l10n"]) == 1
    assert "apt-get not found: 1 of the packages are not in" in _error(capsys)
