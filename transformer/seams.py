"""The Keras layers and optimizer that have faster drop-in kernels: chosen here, once.

The paper's modules build every layer norm and dropout with `LayerNormalization`
and `Dropout` of this module, and `transformer.training.make_optimizer` its
Adam with `adam`, and `transformer.training.MaskedLoss` computes the token
losses of a step without XLA with `token_losses`. Each is Keras's own class or a drop-in subclass of it from
`transformer.kernels`, with the same arguments, weights and math in fewer
operations (tests/test_fast_ops.py, tests/test_training.py,
tests/test_moving_average.py), so the paper's modules read as Keras and as
the paper (`self.layernorm(x + y)`) and import no kernel. To run the model
on Keras's own layers, point these names at them before building it.
"""

from __future__ import annotations

from transformer.kernels.fast_ops import Dropout, LayerNormalization, softmax_cross_entropy
from transformer.kernels.optimizers import AveragingAdam, FusedAdam

__all__ = ["Dropout", "LayerNormalization", "adam", "token_losses"]

# `transformer.training.token_losses`' math with its gradient written out.
token_losses = softmax_cross_entropy


def adam(learning_rate, *, ema_momentum: float = 0.0, **settings):
    """Keras' Adam with fused updates (`FusedAdam`); with `ema_momentum` > 0 it
    also keeps a warmed-up moving average of the weights (`AveragingAdam`),
    which the run puts into the model when training ends."""
    if ema_momentum:
        return AveragingAdam(learning_rate, use_ema=True, ema_momentum=ema_momentum, **settings)
    return FusedAdam(learning_rate, **settings)
