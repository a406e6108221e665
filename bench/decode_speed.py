"""Decoding speed, one entry point with two modes:

- `engines`: a trained run's test split decoded by translate.py's TensorFlow
  engine and by CTranslate2 (float32, int8), one and two cores, greedy and
  beam 4: sentences a second, start-up, BLEU and agreement
  (`bench/speed/engines.py`);
- `cached`: the cached greedy decoder against the tutorial's loop, which
  re-runs the whole model every step (`bench/speed/cached.py`).

Example:

    python bench/decode_speed.py engines --run RUN --test ui-es-en/test.tsv --name ui5
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from common import run_mode  # noqa: E402

MODES = {
    "engines": ("speed.engines", "TensorFlow against CTranslate2 on a run's test split"),
    "cached": ("speed.cached", "cached greedy decoding against the tutorial's loop"),
}


def main(argv=None) -> int:
    return run_mode(argv, __doc__, MODES, __file__)


if __name__ == "__main__":
    sys.exit(main())
