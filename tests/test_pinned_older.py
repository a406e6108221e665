"""Older behaviours a one-line slip would break silently, pinned (issue 66):
the moving average of the weights where the kernels are not used (JAX and
PyTorch build Keras's own Adam), ... (see each test).
"""

from __future__ import annotations

import numpy as np
import pytest


def test_without_the_kernels_the_optimizer_still_keeps_the_moving_average(monkeypatch):
    """Under JAX and PyTorch `seams.adam` is Keras's own Adam: with a momentum
    it keeps Keras's moving average (`use_ema`), which the run then delivers."""
    import keras

    from transformer import seams
    from transformer.training import make_optimizer

    monkeypatch.setattr(seams, "KERNELS", False)
    kept = make_optimizer(16, 100, ema_momentum=0.99)
    assert type(kept) is keras.optimizers.Adam
    assert kept.use_ema and kept.ema_momentum == pytest.approx(0.99)
    assert not make_optimizer(16, 100).use_ema
    # Three steps: the average lags behind the weights.
    variable = keras.Variable(np.ones(3, np.float32))
    kept.build([variable])
    for _ in range(3):
        kept.apply([np.ones(3, np.float32)], [variable])
    average = np.array(kept._model_variables_moving_average[0])
    assert np.all(average > np.array(variable) + 1e-4)
