"""The modes of `bench/train_speed.py` and `bench/decode_speed.py`, one module a mode
(and the parts they share); run them through those two entry points."""
