"""Builds a many-languages-to-English corpus from the gettext catalogs of Debian packages.

Programs translated with gettext ship compiled catalogs (`.mo` files, in
`usr/share/locale/<lang>/LC_MESSAGES/` and a few other `<lang>/LC_MESSAGES/`
folders); in each entry the msgid is the English string of the source code and
the msgstr its translation, so every catalog of a language is a list of
`translation<TAB>English` pairs. This script downloads a pinned list of Debian
packages (`PACKAGES`, from Debian 12 "bookworm", `RELEASE`; `--packages`
replaces it) with
`apt-get download` into a cache (`--cache`; a .deb already there is reused, so
an interrupted build resumes), reads their catalogs in Python (no extraction to
disk, no dependency beyond the standard library) and writes, for each language:

    <output>/<lang>-en/train.tsv, valid.tsv, test.tsv

and `<output>/manifest.json`: the command, the Debian release of the list and
of the system (a warning when they differ: names and versions may too), each
package's version, architecture and SHA-256, the pairs each package gave each
language, what was left out and the counts of the splits. `--trees DIR` reads
extracted packages (a folder each) instead of downloading. `--mixed` also writes all languages in one corpus,
`<output>/mul-en/`. How an entry becomes a pair:

- the header (empty msgid) is not a message; a context (`ctxt\\x04msgid`) goes;
- plural entries pair the English singular with the first translated form
  (msgstr[0]); the other forms are left out;
- newlines, tabs and runs of white space become one space on both sides;
- keyboard accelerators go from both sides (`accelerators`): the marker `_`
  (GTK), `&` (Qt, KDE) or `~` (LibreOffice) when the English has it once,
  before a letter (`_` and `&` also before a digit), not after `%`, outside an
  entity (`&amp;`) and, for `_`, outside a word written the same in the
  translation (`file_name`, a name, is kept); a doubled marker (`&&`) is a
  literal and becomes single when the pair had an accelerator; in the translation
  its first such marker goes, or else an "(_F)" as the Chinese, Japanese
  and Korean catalogs write it ("ファイル(_F)..." gives "ファイル..."), which
  also goes when the English has no accelerator;
- in a translation, a KDE script (what follows `|/|`) goes;
- format strings (`%s`, `{0}`, `%(name)s`) and markup stay as they are;
- an entry with an empty translation, or one equal to the English (not
  translated), is left out; so are the translator credits (`CREDITS`), settings
  written as messages ("calendar:week_start:0") and messages without a word of
  two letters outside their format fields (dates such as "%d.%m.%Y", "%s: %s");
- identical pairs after the first go (a language's pairs are a set; the same
  English with two translations stays). The mixed corpus is the set of all
  languages' pairs.

Catalog folders name their language `de`, `pt_BR` or `pt-BR`; `-` counts as
`_`, and a language takes only the folders of its exact name (`de`, not
`de_CH` or `de@hebrew`). The splits go by the SHA-256 of the English string:
a fraction `--share` (default 1%) of the positions each for test and
validation, the rest for training, so the same English message is in one split
only, in every language and in the mixed corpus, whatever the package list.
Each file's lines are in the order of a hash of the pair (a fixed shuffle).

A package that cannot be downloaded stops the build, naming it, after the
others are downloaded (the corpus is defined by its list: leave the package
out with `--packages` to go on without it). Errors are one line on stderr with
exit status 1.

Example (on Debian 12, with apt's package lists up to date; the measure below):

    apt-get update
    taskset -c 0 python bench/gettext_corpus.py --output data/gettext \\
        --cache data/debs --mixed

Measured on 2026-12-06, from an empty cache: 105 packages,
290 MB of .deb files downloaded in 11 s; 2,934 catalogs read in 6.5 minutes
(69 s of CPU on one core shared with other work; xz decompression is most of
it); 0.74 GB of memory at most; 241 MB written (121 MB of it `mul-en`). Pairs
(train / valid / test):

    de-en     183,487  (179,792 / 1,860 / 1,835)
    fr-en     207,011  (202,875 / 2,072 / 2,064)
    es-en     186,158  (182,492 / 1,834 / 1,832)
    it-en     160,067  (156,892 / 1,570 / 1,605)
    pt_BR-en  148,982  (146,000 / 1,485 / 1,497)
    ru-en     189,665  (185,897 / 1,891 / 1,877)
    ja-en     142,551  (139,710 / 1,432 / 1,409)
    zh_CN-en  170,393  (167,012 / 1,696 / 1,685)
    total   1,388,314; mul-en 1,377,563 (the same pair in two languages once),
            214,180 English strings

Left out: 104,885 untranslated entries, 3,730 without words, 1,015 credits,
155 empty, 83 settings. Other languages are about as well covered by these
packages (a first count, before the last filters and without LibreOffice: uk
170,000 pairs, sv 161,000, pl 155,000, tr 141,000, nl 138,000).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

RELEASE = "bookworm"  # Debian 12

LANGUAGES = ("de", "fr", "es", "it", "pt_BR", "ru", "ja", "zh_CN")

# Debian packages with many catalogs, each in many languages (desktop programs,
# their libraries and command-line tools; 2026-12 measure: the fewest pairs a
# package gives the default languages is about 1,000), then LibreOffice's
# one-language packages for the default languages.
PACKAGES = (
    "anjuta-common", "apt", "aptitude-common", "audacity-data", "binutils-common",
    "bluefish-data", "brasero-common", "caja-common", "cheese-common", "cinnamon-l10n",
    "claws-mail-i18n", "coreutils", "darktable", "dia-common", "digikam-data",
    "dolphin", "dpkg", "e2fsprogs-l10n", "evince-common", "evolution-common",
    "evolution-data-server-common", "file-roller", "filezilla-common", "freeciv-data",
    "gcc-12-locales", "geany-common", "gedit-common", "gettext", "gimp-data", "git",
    "gnome-builder", "gnome-calendar", "gnome-clocks", "gnome-contacts",
    "gnome-control-center-data", "gnome-disk-utility", "gnome-maps", "gnome-photos",
    "gnome-shell-common", "gnome-software-common", "gnome-system-monitor",
    "gnome-terminal-data", "gnucash-common", "gnumeric-common", "gnupg-l10n", "gramps",
    "grub-common", "gucharmap", "gwenview", "hexchat-common", "hugin-data", "inkscape",
    "iso-codes", "k3b-i18n", "kdenlive-data", "kdevelop-l10n", "kile-l10n", "konsole",
    "krita-l10n", "kwin-data", "libc-l10n", "libglib2.0-data", "libgtk-3-common",
    "libgtk-4-common", "libgtk2.0-common", "libnma-common", "libwnck-3-common",
    "libxfce4ui-common", "mate-desktop-common", "mypaint-data", "nano", "nautilus-data",
    "network-manager", "network-manager-gnome", "orca", "pidgin-data",
    "plasma-desktop-data", "plasma-workspace-data", "pluma-common", "poedit-common",
    "rhythmbox-data", "ristretto", "seahorse", "shotwell-common", "simple-scan",
    "synaptic", "thunar-data", "totem-common", "util-linux-locales", "vlc-l10n",
    "xfce4-panel", "xfce4-session", "xfce4-settings", "xfce4-terminal",
    "xfdesktop4-data", "xfwm4", "xkb-data",
    "libreoffice-l10n-de", "libreoffice-l10n-fr", "libreoffice-l10n-es",
    "libreoffice-l10n-it", "libreoffice-l10n-pt-br", "libreoffice-l10n-ru",
    "libreoffice-l10n-ja", "libreoffice-l10n-zh-cn",
)

ACCELERATORS = "_&~"
_CATALOG = re.compile(r"(?:^|/)([^/]+)/LC_MESSAGES/[^/]+\.mo$")
_ENTITY = re.compile(r"&(?:[A-Za-z]+|#\d+|#x[0-9A-Fa-f]+);")
_SPACE = re.compile(r"\s+")
_LETTER = r"[^\W\d_]"
_SUFFIX = {marker: re.compile(rf"\s*[(（]{re.escape(marker)}[A-Za-z0-9][)）]")
           for marker in ACCELERATORS}
_MO_MAGIC = 0x950412DE
# Entries whose translation is the translators' names and addresses (GNOME, KDE).
CREDITS = {"translator-credits", "translator_credits", "translator credits", "Your names",
           "Your emails"}
# Settings written as messages ("calendar:week_start:0", "tips-locale:C").
_KEY = re.compile(r"[a-z][\w-]*(?::[\w-]+)+")
# printf, strftime and Python format fields; a message has a word of 2 letters beside them.
_FORMAT = re.compile(r"%(?:\d+\$)?[-#0 +']*\d*(?:\.\d+)?[hlLqjztI]*[A-Za-z%]|\{[^{}]*\}")
_WORD = re.compile(r"[^\W\d_]{2}")


class CorpusError(Exception):
    """A problem the user can fix; its message is printed as one line."""


def progress(message: str) -> None:
    print(message, flush=True)


# --- Reading catalogs ---------------------------------------------------------------

def parse_mo(data: bytes) -> list[tuple[str, str]]:
    """Returns the (msgid, msgstr) entries of a compiled catalog, decoded with the
    charset of its header; ValueError when `data` is not a .mo file."""
    if len(data) < 28:
        raise ValueError("too short for a .mo file")
    for order in "<>":
        magic, _, count, ids_at, strs_at = struct.unpack_from(order + "5I", data)
        if magic == _MO_MAGIC:
            break
    else:
        raise ValueError("no .mo magic number")
    raw = []
    for index in range(count):
        id_len, id_at = struct.unpack_from(order + "2I", data, ids_at + 8 * index)
        str_len, str_at = struct.unpack_from(order + "2I", data, strs_at + 8 * index)
        if id_at + id_len > len(data) or str_at + str_len > len(data):
            raise ValueError("a string runs past the end of the file")
        raw.append((data[id_at:id_at + id_len], data[str_at:str_at + str_len]))
    charset = "utf-8"
    for msgid, msgstr in raw:
        if msgid == b"":
            match = re.search(rb"charset=([\w.-]+)", msgstr, re.I)
            if match and match[1].lower() != b"charset":
                charset = match[1].decode("ascii")
    try:
        "".encode(charset)
    except LookupError:
        charset = "utf-8"
    return [(msgid.decode(charset, "replace"), msgstr.decode(charset, "replace"))
            for msgid, msgstr in raw]


def catalog_language(path: str) -> str | None:
    """The language of a catalog from its path (`.../pt-BR/LC_MESSAGES/x.mo`: `pt_BR`)."""
    match = _CATALOG.search(path)
    return match[1].replace("-", "_") if match else None


def _one_line(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _markers(text: str, marker: str) -> list[int]:
    """Where `marker` stands as an accelerator: single (a doubled one is a literal),
    before a letter (or, for `_` and `&`, a digit), not after `%` (`%_H`, a strftime
    field) and not starting an entity."""
    escaped = re.escape(marker)
    follows = _LETTER if marker == "~" else r"[^\W_]"
    return [match.start() for match in
            re.finditer(rf"(?<![{escaped}%]){escaped}(?={follows})", text)
            if not (marker == "&" and _ENTITY.match(text, match.start()))]


def _word_at(text: str, at: int) -> str:
    start = at
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    end = at + 1
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return text[start:end]


def accelerators(english: str, translation: str) -> tuple[str, str]:
    """Removes a keyboard accelerator marker from both strings (rules in the docstring)."""
    for marker in ACCELERATORS:
        found = _markers(english, marker)
        if len(found) != 1:
            continue
        at = found[0]
        word = _word_at(english, at)
        if marker == "_" and not word.startswith(marker) and re.search(
                rf"(?<!\w){re.escape(word)}(?!\w)", translation):
            return english, translation  # a name such as file_name, in both
        english = english[:at] + english[at + 1:]
        if _SUFFIX[marker].search(translation):
            translation = _SUFFIX[marker].sub("", translation, count=1)
        elif theirs := _markers(translation, marker):
            translation = translation[:theirs[0]] + translation[theirs[0] + 1:]
        double = marker * 2
        return english.replace(double, marker), translation.replace(double, marker)
    for suffix in _SUFFIX.values():  # the English without one, the translation with one
        translation = suffix.sub("", translation, count=1)
    return english, translation


def message_pairs(entries, skipped: collections.Counter | None = None):
    """Yields (translation, English) for the catalog entries worth a pair; counts the
    others in `skipped` by reason."""
    skipped = skipped if skipped is not None else collections.Counter()
    for msgid, msgstr in entries:
        if msgid == "":
            continue
        english = msgid.split("\x04", 1)[-1].split("\x00", 1)[0]
        translation = msgstr.split("\x00", 1)[0].split("|/|", 1)[0]
        english, translation = accelerators(_one_line(english), _one_line(translation))
        if not english or not translation:
            skipped["empty"] += 1
        elif translation == english:
            skipped["untranslated"] += 1
        elif english in CREDITS:
            skipped["credits"] += 1
        elif _KEY.fullmatch(english):
            skipped["keys"] += 1
        elif not _WORD.search(_FORMAT.sub(" ", english)):
            skipped["no words"] += 1
        else:
            yield translation, english


def catalogs_in_tree(root: Path):
    """Yields (path, bytes) for the .mo files under an extracted package tree."""
    for path in sorted(root.rglob("*.mo")):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and catalog_language(relative):
            yield relative, path.read_bytes()


class _Slice(io.RawIOBase):
    """A read-only window on an open file (one member of an ar archive)."""

    def __init__(self, handle, start: int, size: int):
        self.handle, self.left = handle, size
        handle.seek(start)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.handle.read(min(len(buffer), self.left))
        self.left -= len(data)
        buffer[:len(data)] = data
        return len(data)


def _ar_members(handle, path: Path) -> dict[str, tuple[int, int]]:
    """{name: (offset, size)} of the members of a .deb (an ar archive)."""
    if handle.read(8) != b"!<arch>\n":
        raise CorpusError(f"{path} is not a .deb file; delete it from the cache")
    members = {}
    while header := handle.read(60):
        if len(header) < 60:
            break
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
        members[name] = (handle.tell(), size)
        handle.seek(size + size % 2, os.SEEK_CUR)
    return members


def _deb_tar(handle, members, prefix: str, path: Path) -> tarfile.TarFile:
    name = next((n for n in members if n.startswith(prefix)), None)
    if name is None:
        raise CorpusError(f"{path} has no {prefix}* member; delete it from the cache")
    if name.endswith(".zst"):
        raise CorpusError(f"{path}: {name} is zstd-compressed, which Python cannot read")
    return tarfile.open(fileobj=io.BufferedReader(_Slice(handle, *members[name]), 1 << 20),
                        mode="r|*")


def deb_control(path: Path) -> dict[str, str]:
    """The Package, Version and Architecture fields of a .deb."""
    with open(path, "rb") as handle, \
            _deb_tar(handle, _ar_members(handle, path), "control.tar", path) as tar:
        for member in tar:
            if member.name.lstrip("./") == "control":
                text = tar.extractfile(member).read().decode("utf-8", "replace")
                fields = dict(re.findall(r"^(\w[\w-]*): *(.*)$", text, re.M))
                return {key: fields.get(key, "") for key in ("Package", "Version", "Architecture")}
    raise CorpusError(f"{path} has no control file; delete it from the cache")


def catalogs_in_deb(path: Path, languages=None):
    """Yields (path, bytes) for the .mo files in a .deb (of `languages` only, if given)."""
    with open(path, "rb") as handle, \
            _deb_tar(handle, _ar_members(handle, path), "data.tar", path) as tar:
        for member in tar:
            language = catalog_language(member.name) if member.isfile() else None
            if language and (languages is None or language in languages):
                yield member.name.lstrip("./"), tar.extractfile(member).read()


# --- Downloading ---------------------------------------------------------------------

def cached_deb(cache: Path, package: str) -> Path | None:
    """The newest .deb of `package` in the cache, or None."""
    debs = sorted(cache.glob(f"{package}_*.deb"), key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs else None


def _apt_get_download(packages, cache: Path, apt: str) -> str:
    """Downloads packages into the cache with one apt-get call, a progress line for each;
    returns apt's last error line, or "" when all came."""
    with tempfile.TemporaryDirectory(prefix=".partial-", dir=cache) as partial:
        # As root apt drops to the _apt user, which cannot write the folder; it would
        # download anyway, with a warning.
        sandbox = ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []
        errors = []
        with subprocess.Popen([apt, "download", *sandbox, *packages], cwd=partial, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
            for line in proc.stdout:
                fields = line.split()
                if line.startswith("Get:") and len(fields) >= 9:
                    progress(f"download {fields[0][4:]}/{len(packages)} {fields[4]} "
                             f"{fields[6]} {fields[7][1:]} {fields[8][:-1]}")
                elif line.startswith("E:"):
                    errors.append(line.strip())
        for deb in Path(partial).glob("*.deb"):
            shutil.move(str(deb), cache / deb.name)
    if proc.returncode != 0:
        return (errors or [f"apt-get exited with status {proc.returncode}"])[-1]
    return ""


def download(packages, cache: Path) -> list[Path]:
    """The .deb of each package: from the cache, else downloaded with apt-get.

    CorpusError naming the packages apt-get could not download. One apt-get call
    downloads all that are missing; when it fails (a name apt does not know stops
    it before it downloads anything), each package is tried on its own, so that all
    the others are in the cache when the error names the failed ones.
    """
    cache.mkdir(parents=True, exist_ok=True)
    missing = [package for package in packages if cached_deb(cache, package) is None]
    apt = shutil.which("apt-get")
    if missing and apt is None:
        raise CorpusError(
            f"apt-get not found: {len(missing)} of the packages are not in {cache} "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); this script "
            "downloads them with Debian's apt-get")
    progress(f"{len(packages) - len(missing)} of {len(packages)} packages in {cache}")
    if missing and _apt_get_download(missing, cache, apt):
        failed = []
        for package in [package for package in missing if cached_deb(cache, package) is None]:
            message = _apt_get_download([package], cache, apt)
            if message or cached_deb(cache, package) is None:
                failed.append(f"{package} ({message or 'no .deb of that name'})")
        if failed:
            raise CorpusError(
                f"could not download {len(failed)} package(s): {'; '.join(failed)}; run "
                "apt-get update, check the names with apt-cache policy, or leave them out "
                "with --packages")
    return [cached_deb(cache, package) for package in packages]


# --- Building ------------------------------------------------------------------------

def collect(sources, languages):
    """Reads the catalogs of each source: (name, iterable of (path, bytes)).

    Returns {language: {(translation, English): None}} (first-seen order), the pairs
    each source gave each language before the pairs of other sources were removed,
    and the counts of catalogs read, unreadable and entries skipped.
    """
    pairs = {language: {} for language in languages}
    by_source: dict[str, dict[str, int]] = {}
    counts: collections.Counter = collections.Counter()
    for name, catalogs in sources:
        given: collections.Counter = collections.Counter()
        for path, data in catalogs:
            language = catalog_language(path)
            if language not in pairs:
                continue
            try:
                entries = parse_mo(data)
            except (ValueError, struct.error):
                counts["unreadable catalogs"] += 1
                continue
            counts["catalogs"] += 1
            for pair in message_pairs(entries, counts):
                given[language] += 1
                pairs[language].setdefault(pair, None)
        by_source[name] = {language: given[language] for language in languages if given[language]}
    return pairs, by_source, counts


def position(english: str) -> float:
    """Where an English string falls in [0, 1), from its SHA-256 alone."""
    return int(hashlib.sha256(english.encode("utf-8")).hexdigest()[:15], 16) / 16**15


def split_of(english: str, share: float) -> str:
    """'test', 'valid' or 'train' for an English string (same in every language)."""
    at = position(english)
    return "test" if at < share else "valid" if at < 2 * share else "train"


def _order(pair) -> str:
    return hashlib.sha256("\t".join(pair).encode("utf-8")).hexdigest()


def write_splits(pairs, folder: Path, share: float) -> dict[str, int]:
    """Writes train.tsv, valid.tsv and test.tsv of (translation, English) pairs; returns
    the pairs in each."""
    splits: dict[str, list] = {"train": [], "valid": [], "test": []}
    for pair in sorted(pairs, key=_order):
        splits[split_of(pair[1], share)].append(pair)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        with open(folder / f"{name}.tsv", "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(f"{source}\t{english}\n" for source, english in rows)
    return {name: len(rows) for name, rows in splits.items()}


def _check_output(output: Path) -> None:
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise CorpusError(f"{output} is not an empty folder; choose another --output")


def _release() -> str:
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    match = re.search(r"^VERSION_CODENAME=\"?(\w+)", text, re.M)
    return match[1] if match else "unknown"


def build(args: argparse.Namespace) -> dict:
    """Downloads (or reads) the packages, writes the corpus and its manifest; returns it."""
    start = time.perf_counter()
    _check_output(args.output)
    manifest = {"command": " ".join(["bench/gettext_corpus.py", *args.argv]),
                "pinned_release": RELEASE, "languages": list(args.languages),
                "share": args.share, "packages": []}
    if args.trees:
        if not args.trees.is_dir():
            raise CorpusError(f"--trees {args.trees} is not a folder")
        roots = sorted(path for path in args.trees.iterdir() if path.is_dir())
        sources = [(root.name, catalogs_in_tree(root)) for root in roots]
        manifest["trees"] = str(args.trees)
    else:
        release = _release()
        manifest["release"] = release
        if release != RELEASE:
            progress(f"warning: this system is Debian {release}, the package list is "
                     f"{RELEASE}'s: the corpus may differ")
        debs = download(args.packages, args.cache)
        for deb in debs:
            manifest["packages"].append({
                **deb_control(deb), "file": deb.name,
                "sha256": _sha256(deb)})
        sources = [(entry["Package"], _reading(deb, number, len(debs), args.languages))
                   for number, (deb, entry) in enumerate(zip(debs, manifest["packages"], strict=True), 1)]
    pairs, by_source, counts = collect(sources, args.languages)
    manifest["pairs_by_package"] = by_source
    manifest["catalogs"] = dict(counts)
    total = sum(len(found) for found in pairs.values())
    if total == 0:
        raise CorpusError(
            f"no pairs found: no catalog of {', '.join(args.languages)} in the packages "
            f"({counts['catalogs']} catalogs read); check --languages and --packages")
    manifest["splits"] = {}
    for language, found in pairs.items():
        if not found:
            progress(f"warning: no pairs for {language}; no {language}-en folder")
            continue
        manifest["splits"][f"{language}-en"] = write_splits(
            found, args.output / f"{language}-en", args.share)
    if args.mixed:
        mixed = dict.fromkeys(pair for found in pairs.values() for pair in found)
        manifest["splits"]["mul-en"] = write_splits(mixed, args.output / "mul-en", args.share)
    manifest["seconds"] = round(time.perf_counter() - start, 1)
    with open(args.output / "manifest.json", "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, ensure_ascii=False, indent=1)
        handle.write("\n")
    for name, splits in manifest["splits"].items():
        progress(f"{name}: {sum(splits.values()):,} pairs (" + ", ".join(
            f"{split} {count:,}" for split, count in splits.items()) + ")")
    progress(f"{total:,} pairs in {len(pairs)} languages from {counts['catalogs']:,} catalogs; "
             f"wrote {args.output} in {manifest['seconds']:.0f} s")
    return manifest


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _reading(deb: Path, number: int, count: int, languages):
    """catalogs_in_deb with a progress line for each package."""
    progress(f"read {number}/{count} {deb.name}")
    yield from catalogs_in_deb(deb, set(languages))


def parse_args(argv=None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True,
                        help="an empty or new folder for <lang>-en/{train,valid,test}.tsv")
    parser.add_argument("--languages", nargs="+", default=list(LANGUAGES), metavar="LANG",
                        help=f"catalog languages (default: {' '.join(LANGUAGES)})")
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES), metavar="PACKAGE",
                        help=f"Debian packages to read (default: the {len(PACKAGES)} of PACKAGES)")
    parser.add_argument("--cache", type=Path,
                        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                        / "gettext_corpus",
                        help="folder for the downloaded .deb files, reused by the next build "
                             "(default: ~/.cache/gettext_corpus)")
    parser.add_argument("--trees", type=Path,
                        help="read extracted packages (one folder each) instead of downloading")
    parser.add_argument("--mixed", action="store_true",
                        help="also write all languages in one corpus, <output>/mul-en")
    parser.add_argument("--share", type=float, default=0.01,
                        help="fraction of the English strings in each of valid and test "
                             "(default 0.01)")
    args = parser.parse_args(argv)
    if not 0 < args.share < 0.5:
        parser.error(f"--share must be between 0 and 0.5, got {args.share}")
    args.languages = list(dict.fromkeys(lang.replace("-", "_") for lang in args.languages))
    args.argv = argv
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        build(args)
    except CorpusError as exc:
        print(f"gettext_corpus.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
