"""Decoding speed, one entry point with three modes:

- `engines`: a trained run's test split decoded by translate.py's TensorFlow
  engine and by CTranslate2 (float32, int8), one and two cores, greedy and
  beam 4: sentences a second, start-up, BLEU and agreement
  (`bench/speed/engines.py`);
- `cached`: the cached greedy decoder against the tutorial's loop, which
  re-runs the whole model every step (`bench/speed/cached.py`);
- `serve`: `transformer-serve` under 1, 8 and 32 concurrent clients against
  the engine called directly (`bench/speed/serve_load.py`).

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
    "serve": ("speed.serve_load", "transformer-serve under load against the engine itself"),
}


def main(argv=None) -> int:
    return run_mode(argv, __doc__, MODES, __file__)


if __name__ == "__main__":
    sys.exit(main())
