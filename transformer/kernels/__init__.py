"""Speed kernels: the same math as Keras in fewer kernels, private tricks the paper avoids.

The paper's modules (`positional`, `masking`, `attention`, `layers`, `model`,
`training`) use public Keras and TensorFlow API only (tests/test_public_api_only.py
checks it). What makes a training step faster by reaching into Keras's
private members lives here, each piece equal to the
Keras computation it replaces (tests/test_fast_ops.py, tests/test_training.py,
tests/test_moving_average.py, tests/test_distributed_training.py):

- `fast_ops`: `Dropout` and `LayerNormalization`, Keras's layers in fewer
  TensorFlow ops.
- `optimizers`: `FusedAdam` (Keras' Adam, one kernel per weight),
  `AveragingAdam` (plus a warmed-up moving average of the weights),
  `use_moving_average` and `learning_rate_schedule`.
- `multiworker`: the workaround that lets Keras' `fit` run under
  `MultiWorkerMirroredStrategy`.

`transformer.seams` is the one place that puts the layers and optimizers in
the place of Keras's in the paper's modules (attention, layers, model and
`transformer.training.make_optimizer`), and the only module outside this
package that imports it. The process's memory allocators, which need no
Keras, are `transformer.run.allocator`.

Importing this package imports nothing: each module is imported by name.
"""
