"""Training speed, one entry point with four modes:

- `step`: the real-text training step of the defaults on token-budget batches,
  and what its parts cost (the 2-D output projection, `FusedAdam`, oneDNN,
  the allocators, XLA, fixed shapes), each variant in its own process
  (`bench/speed/step.py`);
- `keras`: the tutorial preset's step against the same architecture on
  `keras.layers.MultiHeadAttention` and keras-hub (`bench/speed/keras_race.py`);
- `tokenizers`: WordPiece against SentencePiece on a real corpus
  (`bench/speed/tokenizers.py`);
- `data`: vocabulary building and the input pipeline (`bench/speed/data.py`).

Example (the real-text step's milliseconds, on one core):

    taskset -c 0 python bench/train_speed.py step --data ui-es-en/train.tsv \\
        --variants default --rounds 3
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from common import run_mode  # noqa: E402

MODES = {
    "step": ("speed.step", "the real-text training step and what its parts cost"),
    "keras": ("speed.keras_race", "ours against the model on Keras' MultiHeadAttention"),
    "tokenizers": ("speed.tokenizers", "WordPiece against SentencePiece on a corpus"),
    "data": ("speed.data", "vocabulary building and the input pipeline"),
}


def main(argv=None) -> int:
    return run_mode(argv, __doc__, MODES, __file__)


if __name__ == "__main__":
    sys.exit(main())
