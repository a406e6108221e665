#!/usr/bin/env python
"""`python train.py` from a clone: a shim that runs the command line `transformer.cli.train`.

It trains a Transformer translator (Vaswani et al., 2017).

With no arguments it trains the `toy` model on the generated toy
Portuguese-to-English corpus (offline, a few minutes on a laptop CPU),
evaluates it on the toy test split and writes everything to runs/toy/.

    python train.py
    python train.py --data pairs.tsv --preset tutorial --epochs 20
    python train.py --output-dir runs/toy --resume      # after an interruption
    python translate.py --run runs/toy "o gato preto come o bolo"

The command is `transformer.cli.train` (installed as `transformer-train`); the
work is `transformer.run.train`.
"""

from transformer.cli.train import main

if __name__ == "__main__":
    raise SystemExit(main())
