"""Speed kernels: the same math as Keras in fewer kernels, private tricks the paper avoids.

The paper's modules (`positional`, `masking`, `attention`, `layers`, `model`,
`training`) use public Keras and TensorFlow API only (tests/test_public_api_only.py
checks it). What makes a training step faster by reaching into Keras's
private members, or into the process, lives here, each piece equal to the
Keras computation it replaces (tests/test_fast_ops.py, tests/test_training.py,
tests/test_moving_average.py, tests/test_distributed_training.py):

- `fast_ops`: dropout and the residual-and-layer-norm of section 3.1 in fewer
  TensorFlow ops (used by the attention blocks, layers and model).
- `optimizers`: `FusedAdam` (Keras' Adam, one kernel per weight),
  `AveragingAdam` (plus a warmed-up moving average of the weights),
  `make_optimizer` (the paper's Adam and `CustomSchedule`), `use_moving_average`
  and `learning_rate_schedule`.
- `allocator`: keeps a step's freed memory for the next step
  (`use_fast_allocators`; standard library only).
- `multiworker`: the workaround that lets Keras' `fit` run under
  `MultiWorkerMirroredStrategy`.

Importing this package imports nothing: each module is imported by name.
"""
