"""What a run was trained on: a fingerprint of its data, kept in `config.json`.

A resumed run continues the saved vocabulary, `steps_per_epoch` and position
in the data stream, which mean nothing for other data. So `config.json`
records a fingerprint of every input (`data_fingerprint`), and a resume whose
data differ is refused, naming the input (`check_data_unchanged`):

- a TSV file: its path, size in bytes, the pairs read from it and the SHA-256
  of its content;
- a TFDS dataset: its name, and for each split its name, the dataset's
  version, the pairs read and the SHA-256 of those pairs;
- the toy corpus: its seed, the pairs of each split and their SHA-256 (a
  change of the generator changes it too).

A `config.json` written before fingerprints were kept has none: such a run
resumes as before, with a warning that its data were not checked, and its
`config.json` then records the current fingerprint.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from transformer import rundir
from transformer.data.corpus import Corpus, Pair
from transformer.data.streamed import file_sha256

logger = logging.getLogger(__name__)

# The key of config.json that holds `data_fingerprint`.
FINGERPRINT_KEY = "data_fingerprint"

def pairs_sha256(pairs: list[Pair]) -> str:
    """The SHA-256 of sentence pairs as UTF-8 `source<TAB>target<LF>` lines."""
    digest = hashlib.sha256()
    for source, target in pairs:
        digest.update(f"{source}\t{target}\n".encode())
    return digest.hexdigest()


def data_fingerprint(source, corpus: Corpus) -> dict[str, dict]:
    """The fingerprint of a run's inputs, one entry per input (see the module docstring).

    Args:
        source: the run's `transformer.data.source.CorpusSource`, or anything
            with its `data`, `valid`, `test`, `dataset` and `seed` (a `RunConfig`).
        corpus: the `Corpus` read from those inputs.

    Returns:
        A JSON-serializable dict: input -> its fingerprint.
    """
    if source.data:
        # Validation and test pairs given in no file of their own were read from `data`.
        read = {
            "data": len(corpus.train) + (0 if source.valid else len(corpus.valid))
            + (0 if source.test else len(corpus.test)),
            "valid": len(corpus.valid),
            "test": len(corpus.test),
        }
        # The files' digests were computed in the pass that read them, when it did.
        return {
            role: {"path": str(path), "bytes": Path(path).stat().st_size, "pairs": read[role],
                   "sha256": corpus.file_sha256.get(str(path)) or file_sha256(path)}
            for role, path in (("data", source.data), ("valid", source.valid),
                               ("test", source.test))
            if path
        }
    splits = {"train": corpus.train, "validation": corpus.valid, "test": corpus.test}
    if source.dataset == "toy":
        every = [pair for pairs in splits.values() for pair in pairs]
        return {"toy": {"seed": source.seed, "pairs": len(every),
                        "split_pairs": [len(pairs) for pairs in splits.values()],
                        "sha256": pairs_sha256(every)}}
    return {
        split: {"name": source.dataset, "split": split, "version": corpus.version,
                "pairs": len(pairs), "sha256": pairs_sha256(pairs)}
        for split, pairs in splits.items()
    }


def check_data_unchanged(run_dir: Path, saved: dict[str, dict] | None,
                         fingerprint: dict[str, dict]) -> None:
    """Refuses to resume the run in `run_dir` on other data than it was trained on.

    Args:
        run_dir: the run directory, named in the messages.
        saved: the fingerprint its `config.json` holds (None if it has none).
        fingerprint: `data_fingerprint` of the data read now.

    Raises:
        transformer.rundir.RunDirError: an input differs; one line naming it,
            with what was saved and what was read.
    """
    if saved is None:
        logger.warning(
            "%s records no fingerprint of the run's data (it was written by an older "
            "version): resuming without checking that the data are unchanged.",
            run_dir / rundir.CONFIG_FILE)
        return
    for key in sorted(set(saved) | set(fingerprint)):
        before, now = saved.get(key), fingerprint.get(key)
        if before != now:
            raise rundir.RunDirError(
                f"Cannot resume {str(run_dir)!r}: {_name(key, before or now)} differs from "
                f"the data the run was trained on (then: {_describe(before)}; now: "
                f"{_describe(now)}). Resume with the original data, or start a new run in "
                "another --output-dir."
            )


def _name(key: str, entry: dict) -> str:
    if "path" in entry:
        return repr(entry["path"])
    if key == "toy":
        return f"the toy corpus (seed {entry.get('seed')})"
    return f"{entry.get('name')} split {entry.get('split')!r}"


def _describe(entry: dict | None) -> str:
    if entry is None:
        return "not an input"
    parts = [f"{entry['pairs']} pairs" if "pairs" in entry else ""]
    if "bytes" in entry:
        parts.append(f"{entry['bytes']:,} bytes")
    if entry.get("version"):
        parts.append(f"version {entry['version']}")
    if "sha256" in entry:
        parts.append(f"sha256 {entry['sha256'][:12]}")
    return ", ".join(part for part in parts if part)
