"""Every repository path that the repository's own text cites exists in it.

A citation is a path-like word in a source, test, benchmark or document file
(a relative path with a slash, or a bare name ending in `.md` or `.py`). It is
checked when it points into the repository:
its first folder is a top-level folder of the repository (`transformer/`,
`tests/`, `bench/`, `docs/`, `notebooks/`, `.ci/`) or a folder beside the
citing file (`results/` in `bench/`), or it climbs out of its folder. Bare
`.md` and `.py` names must be some file's name in the repository. Paths that
a reader makes (`runs/toy`, `pairs.tsv`) start nowhere in the repository and
are not checked; the few that do look like the repository's are in
`MADE_PATHS` and `EXAMPLE_NAMES`. URLs and templates (`<setup>`, `{name}`)
are ignored. Not read: this file, the measurement records in `bench/results/`
(data: the command lines as they were run), the test fixtures and the built
notebooks (their source, `notebooks/src/`, is read).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What is read: these files and the text files under these folders.
TOP_FILES = ("README.md", "BENCHMARKS.md", "requirements.txt", "requirements-dev.txt",
             "pyproject.toml", "train.py", "translate.py", ".ci/run")
FOLDERS = ("transformer", "tests", "bench", "docs", "notebooks", ".ci")
SKIPPED = ("bench/results", "tests/fixtures", "bench/peer_joeynmt/.venv")
SUFFIXES = {".py", ".md", ".txt", ".toml", ".sh", ".cfg", ".css", ".js", ".html"}

# Paths inside the repository's folders that a command of the repository
# makes: the peer benchmark's virtual environment (`setup_venv.sh`, ignored by
# git) and a benchmark's output named in its example command.
MADE_PATHS = ("bench/peer_joeynmt/.venv", "bench/results/real_text_recipe.json")
# Bare names of made-up files in examples and tests.
EXAMPLE_NAMES = {"demo.py", "nb.py", "x.py"}

_URL = re.compile(r"\b[a-z][a-z+.-]*://\S+")
_PATH = re.compile(r"(?<![\w/.$~@:-])((?:\.\./)*(?:[\w.-]+/)+[\w.*<>{}-]*)")
_BARE = re.compile(r"(?<![\w/.$~@:-])([\w-]+(?:\.[\w-]+)*\.(?:md|py))\b(?![/\w])")


def _text_files() -> list[Path]:
    files = [REPO / name for name in TOP_FILES]
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            relative = path.relative_to(REPO).as_posix()
            if (path.is_file() and path.suffix in SUFFIXES
                    and not any(relative.startswith(s + "/") for s in SKIPPED)
                    and "__pycache__" not in path.parts):
                files.append(path)
    return [path for path in files if path.is_file() and path != Path(__file__).resolve()]


def _exists(base: Path, cited: str) -> bool:
    cited = cited.rstrip("/")
    if "*" in cited:
        return any(base.glob(cited))
    if (base / cited).exists():
        return True
    # `bench/reference_models.TutorialTransformer`: a module and one of its names.
    module = cited.rsplit(".", 1)[0]
    return "." in cited and (base / f"{module}.py").is_file()


def _missing(path: Path, text: str, roots: set[str], names: set[str]) -> list[str]:
    missing = []
    text = _URL.sub(" ", text)
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path.relative_to(REPO).as_posix()}:{number}"
        for match in _PATH.finditer(line):
            cited = match.group(1).rstrip(".")
            first = cited.split("/", 1)[0]
            if re.search(r"[<>{}]", cited) or cited.startswith(MADE_PATHS):
                continue
            if cited.startswith("../") or first == "shared":
                base = path.parent
            elif first in roots:
                base = REPO
            elif first and path.parent != REPO and (path.parent / first).is_dir():
                # At the top, only FOLDERS are the repository's: a reader's
                # `runs/` or `data/` beside README.md is not.
                base = path.parent
            else:
                continue  # the reader's own path (runs/toy, data/train.tsv)
            if not _exists(base, cited):
                missing.append(f"{where}: {cited}")
        for match in _BARE.finditer(line):
            name = match.group(1)
            if name not in names and name not in EXAMPLE_NAMES:
                missing.append(f"{where}: {name}")
    return missing


def test_every_repository_path_the_repository_cites_exists():
    roots = {path.name for path in REPO.iterdir() if path.is_dir()} & set(FOLDERS)
    files = _text_files()
    names = {path.name for folder in FOLDERS for path in (REPO / folder).rglob("*")}
    names |= {path.name for path in REPO.iterdir()}
    missing = []
    for path in files:
        missing += _missing(path, path.read_text(encoding="utf-8"), roots, names)
    assert len(files) > 50, [path.name for path in files]
    assert not missing, "\n".join(missing)
