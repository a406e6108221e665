"""`python translate.py` from a clone: a shim that runs the command line `transformer.cli.translate`.

It translates sentences with a trained run (written by train.py).

    python translate.py --run runs/toy "o gato preto come o bolo"
    python translate.py --run runs/toy "o gato" "os meninos não dormem" --beam 4
    cat sentences.txt | python translate.py --run runs/toy --show-tokens
    python translate.py --run runs/toy "o gato preto" --plot attention.png --layer 1

The command is `transformer.cli.translate` (installed as `transformer-translate`);
from Python, use `transformer.decoding.translator.Translator`.
"""

from transformer.cli.translate import main

if __name__ == "__main__":
    raise SystemExit(main())
