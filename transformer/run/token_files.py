"""The training pairs of a run, tokenized once into its `tokens/` directory.

`training_tokens` tokenizes the training pairs in one streaming pass into
memory-mapped files (`transformer.data.batching.tokenize_pairs` with a
directory) and writes `tokens.json` last, naming what the files were made
from: the data's fingerprint, the tokenizers' files and `max_tokens`. A
resumed run whose `tokens.json` names the same opens the files and starts at
once; anything else (an interrupted write, other tokenizers) tokenizes again.
Subword sampling draws its segmentations into the same directory
(`transformer.run.sampling.drawn_pairs`), anew in each session that reads them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np

from transformer import rundir
from transformer.data.batching import TokenizedPairs, tokenize_pairs
from transformer.data.token_rows import open_rows

logger = logging.getLogger(__name__)

MANIFEST = "tokens.json"
FORMAT = 1
_COUNTS = ("max_tokens", "num_trimmed", "num_trimmed_source", "num_trimmed_target",
           "variants", "sampled_from_pass")


def tokenizers_digest(tokenizers) -> str:
    """A SHA-256 of the tokenizers' vocabulary (and SentencePiece model) files."""
    digest = hashlib.sha256()
    for side in (tokenizers.source, tokenizers.target):
        paths = [side.get_vocab_path()]
        if hasattr(side, "get_model_path"):
            paths.append(side.get_model_path())
        for path in paths:
            digest.update(Path(path.numpy().decode("utf-8")).read_bytes())
    return digest.hexdigest()


def training_tokens(directory, pairs, tokenizers, max_tokens: int,
                    fingerprint: dict) -> TokenizedPairs:
    """The training `pairs` tokenized in `directory`: its files when their
    manifest names this data, these pairs of it (`SplitPairs.identity`), these
    tokenizers and `max_tokens`, else made now."""
    # A streamed split says which pairs of the file it holds; a list is the
    # fingerprinted data itself.
    pairs_identity = pairs.identity() if hasattr(pairs, "identity") else {"pairs": len(pairs)}
    key = {"format": FORMAT, "data": fingerprint, "pairs": pairs_identity,
           "tokenizers": tokenizers_digest(tokenizers), "max_tokens": max_tokens}
    return _made_or_opened(Path(directory), key, lambda: tokenize_pairs(
        pairs, tokenizers, max_tokens, directory=directory))


def _made_or_opened(directory: Path, key: dict, make) -> TokenizedPairs:
    manifest = directory / MANIFEST
    if manifest.is_file():
        record = rundir.read_json(manifest)
        if isinstance(record, dict) and record.get("key") == key:
            tokens = _opened(directory, record)
            logger.info("Opened %d tokenized training pairs in %s.", len(tokens), directory)
            return tokens
    manifest.unlink(missing_ok=True)  # the files below are rewritten
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tokens = make()
    disk = sum(path.stat().st_size for side in ("source", "target")
               for path in directory.glob(f"{side}.*"))
    logger.info("Tokenized %d training pairs in %.1f s into %s (%.1f MB).", len(tokens),
                time.perf_counter() - started, directory, disk / 1e6)
    record = {"key": key, "dtype": str(tokens.context.values.dtype),
              **{name: getattr(tokens, name) for name in _COUNTS}}
    rundir.write_json_atomic(manifest, record)
    return tokens


def _opened(directory: Path, record: dict) -> TokenizedPairs:
    dtype = np.dtype(record["dtype"])
    context, target = (open_rows(directory / f"{side}.ids", directory / f"{side}.splits", dtype)
                       for side in ("source", "target"))
    return TokenizedPairs(context=context, target=target,
                          **{name: record[name] for name in _COUNTS})
