"""Rows of token ids, in memory or memory-mapped from disk, written in chunks.

A corpus of millions of pairs must not live in memory as Python strings or
ragged tensors. `Rows` holds one side of the pairs as two flat arrays, the
ids of every row one after the other (`values`, uint16 when the vocabulary
fits, else int32) and where each row starts (`splits`, int64, one more than
the rows), as fairseq's and Marian's binarized corpora do. Either array may
be an `np.memmap` of a file, so only the pages a batch touches are read.

`RowsWriter` appends rows chunk by chunk, to files in a directory (the run's
`tokens/`, `transformer.run.fitting.training_tokens`) or, without one, to memory.
Nothing holds more than one chunk of text at a time.

>>> rows = Rows.from_lists([[2, 5, 3], [2, 3]])
>>> len(rows), rows.lengths.tolist(), rows[1].tolist()
(2, [3, 2], [2, 3])
>>> rows.padded(np.array([1, 0])).tolist()
[[2, 3, 0], [2, 5, 3]]
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from transformer.constants import PAD_ID

# Ids below this fit in two bytes a token.
_UINT16_LIMIT = 1 << 16


def ids_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype that holds ids below `vocab_size`: uint16 or int32."""
    return np.dtype(np.uint16 if vocab_size <= _UINT16_LIMIT else np.int32)


class Rows:
    """Rows of token ids: row `i` is `values[splits[i]:splits[i + 1]]`.

    Args:
        values: every row's ids, one row after the other (any integer dtype).
        splits: int64 `(rows + 1,)`, `splits[0] == 0`.
    """

    def __init__(self, values: np.ndarray, splits: np.ndarray):
        self.values = values
        self.splits = splits

    @classmethod
    def from_lists(cls, rows, dtype=np.int32) -> Rows:
        """Rows of Python lists of ids (for tests and small examples)."""
        lengths = np.fromiter((len(row) for row in rows), np.int64, len(rows))
        splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.fromiter((i for row in rows for i in row), dtype, int(splits[-1]))
        return cls(values, splits)

    @classmethod
    def from_ragged(cls, ragged) -> Rows:
        """The rows of a `tf.RaggedTensor` of shape `(rows, (ids))`."""
        return cls(ragged.flat_values.numpy(), ragged.row_splits.numpy().astype(np.int64))

    @classmethod
    def concat(cls, parts) -> Rows:
        """The rows of `parts`, one after the other, in memory."""
        parts = list(parts)
        values = np.concatenate([np.asarray(p.values) for p in parts])
        splits, offset = [np.zeros(1, np.int64)], 0
        for part in parts:
            splits.append(np.asarray(part.splits[1:]) - part.splits[0] + offset)
            offset += int(part.splits[-1] - part.splits[0])
        return cls(values, np.concatenate(splits))

    def __len__(self) -> int:
        return len(self.splits) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Each row's number of ids, int64 `(rows,)`."""
        return np.diff(self.splits)

    def __getitem__(self, index):
        """Row `index` as an array, or for a slice (step 1) the rows it selects."""
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("Rows slices take every row (step 1).")
            return Rows(self.values, self.splits[start : max(start, stop) + 1])
        return np.asarray(self.values[self.splits[index] : self.splits[index + 1]])

    def to_list(self) -> list[list[int]]:
        """Every row as a list of ints (loads them all: for tests and small sets)."""
        return [self[i].tolist() for i in range(len(self))]

    def to_ragged(self):
        """The rows as an int64 `tf.RaggedTensor` (loads them all)."""
        import tensorflow as tf

        start = int(self.splits[0])
        values = np.asarray(self.values[start : int(self.splits[-1])], np.int64)
        return tf.RaggedTensor.from_row_splits(values, np.asarray(self.splits) - start)

    def padded(self, indices: np.ndarray, shape: tuple[int, int] | None = None) -> np.ndarray:
        """The rows `indices`, zero-padded (`PAD_ID`) to the longest, or to `shape`.

        Returns int64 `(len(indices), width)`, or `shape` (at least as large).
        """
        indices = np.asarray(indices, np.int64)
        starts = np.asarray(self.splits[indices])
        lengths = np.asarray(self.splits[indices + 1]) - starts
        width = int(lengths.max(initial=0))
        rows, width = shape if shape is not None else (len(indices), width)
        out = np.full((rows, width), PAD_ID, np.int64)
        if len(indices):
            keep = np.arange(width) < lengths[:, None]  # (batch, width)
            # The position of every kept token in `values`, row by row.
            positions = starts[:, None] + np.arange(width)
            out[: len(indices)][keep] = self.values[positions[keep]]
        return out


class RowsWriter:
    """Appends rows chunk by chunk: to `<directory>/<name>.ids` and
    `<name>.splits`, or to memory when `directory` is None; `finish` returns
    the `Rows` (memory-mapped from the files)."""

    def __init__(self, dtype, directory=None, name: str = "rows"):
        self.dtype = np.dtype(dtype)
        self.rows = 0
        self.tokens = 0
        self._paths = None
        self._values: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        if directory is not None:
            directory = Path(directory)
            directory.mkdir(parents=True, exist_ok=True)
            self._paths = (directory / f"{name}.ids", directory / f"{name}.splits")
            for path in self._paths:  # a new file: rows mapped from the old one stay valid
                path.unlink(missing_ok=True)
            self._files = [open(path, "wb") for path in self._paths]  # noqa: SIM115
            self._files[1].write(np.zeros(1, np.int64).tobytes())

    def append(self, values: np.ndarray, lengths: np.ndarray) -> None:
        """Appends rows: their ids one after the other, and each row's length."""
        if len(values) and int(values.max()) > np.iinfo(self.dtype).max:
            raise ValueError(f"an id of {int(values.max())} does not fit {self.dtype}.")
        values = np.asarray(values).astype(self.dtype, copy=False)
        if self._paths is None:
            self._values.append(values)
            self._lengths.append(np.asarray(lengths, np.int64))
        else:
            self._files[0].write(values.tobytes())
            splits = self.tokens + np.cumsum(lengths, dtype=np.int64)
            self._files[1].write(splits.tobytes())
        self.rows += len(lengths)
        self.tokens += int(np.sum(lengths))

    def finish(self) -> Rows:
        """Closes the files; returns the rows written."""
        if self._paths is None:
            lengths = np.concatenate([np.zeros(1, np.int64), *self._lengths])
            values = np.concatenate(self._values) if self._values else np.zeros(0, self.dtype)
            return Rows(values, np.cumsum(lengths))
        for handle in self._files:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
        return open_rows(*self._paths, self.dtype)


def open_rows(ids_path, splits_path, dtype) -> Rows:
    """The rows of an `.ids` and a `.splits` file, memory-mapped read-only."""
    splits = np.memmap(splits_path, np.int64, mode="r")
    if os.path.getsize(ids_path) == 0:  # np.memmap cannot map an empty file
        return Rows(np.zeros(0, dtype), splits)
    return Rows(np.memmap(ids_path, np.dtype(dtype), mode="r"), splits)
