"""Figures of training: the learning-rate schedule and a run's loss and accuracy curves.

`plot_learning_rate` draws a schedule such as the paper's (section 5.3),
`plot_training_curves` the per-epoch history of `model.fit` or a CSV log.
"""

from __future__ import annotations

import csv
import logging
import math
import numbers
import os
from collections.abc import Callable, Mapping

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from transformer._validation import check_positive_int
from transformer.plot._figure import _invalid, _new_figure, _to_numpy

logger = logging.getLogger(__name__)

__all__ = ["plot_learning_rate", "plot_training_curves"]

# -------------------------------------------------------------------- learning rate


def _evaluate_schedule(schedule: Callable, num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Evaluates `schedule` on float steps 1..num_steps; vectorised when it allows."""
    steps = np.arange(1, num_steps + 1, dtype=np.float32)
    try:
        values = _to_numpy(schedule(steps), "schedule(step)")
        if values.shape == steps.shape:
            return steps, values
        logger.debug("schedule returned shape %s for %d steps", values.shape, num_steps)
    except Exception as error:  # noqa: BLE001 - some schedules only accept scalars.
        logger.debug("schedule is not vectorised (%s); evaluating step by step", error)
    # Scalar schedules: at most 1000 evenly spaced steps, plus the warmup peak.
    samples = np.unique(np.linspace(1, num_steps, min(num_steps, 1000)).round())
    warmup = getattr(schedule, "warmup_steps", None)
    if isinstance(warmup, numbers.Real) and 1 <= warmup <= num_steps:
        samples = np.unique(np.append(samples, float(warmup)))
    samples = samples.astype(np.float32)
    values = np.array([float(_to_numpy(schedule(step), "schedule(step)")) for step in samples])
    return samples, values


def plot_learning_rate(
    schedule: Callable, num_steps: int = 40000, *, title: str | None = None, figsize=None
) -> Figure:
    """Plots a learning-rate schedule against the training step (section 5.3).

    For the paper's schedule, `d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`,
    the rate rises linearly for `warmup_steps` steps, then decays as the inverse
    square root of the step. When the schedule has a `warmup_steps` attribute,
    its peak is marked.

    Args:
        schedule: a callable from a float step to the learning rate, such as a
            `keras.optimizers.schedules.LearningRateSchedule` (e.g. the project's
            `CustomSchedule(d_model, warmup_steps)`). It is called once on a
            float32 array of steps `1, 2, ..., num_steps` (step 0 would divide by
            zero); a schedule that only accepts scalars is called on 1000 evenly
            spaced steps instead.
        num_steps: the last step to plot, a positive integer.
        title: axes title; by default it names the schedule's `d_model` and
            `warmup_steps` when it has them.
        figsize: figure size in inches.

    Returns:
        A `Figure` with one axes.

    Example:

    >>> from transformer.training import CustomSchedule
    >>> fig = plot_learning_rate(CustomSchedule(d_model=128), num_steps=40000)
    """
    if not callable(schedule):
        raise _invalid("schedule", "a callable step -> learning rate", repr(schedule))
    check_positive_int("num_steps", num_steps)
    steps, values = _evaluate_schedule(schedule, int(num_steps))
    fig = _new_figure(figsize or (7.0, 4.2))
    ax = fig.add_subplot()
    ax.plot(steps, values, color="C0", linewidth=1.6, label="learning rate")
    ax.set_xlabel("Train step")
    ax.set_ylabel("Learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    ax.grid(alpha=0.3)
    details = []
    d_model = getattr(schedule, "d_model", None)
    if d_model is not None:
        details.append(f"d_model={_plain_number(d_model)}")
    warmup = getattr(schedule, "warmup_steps", None)
    warmup = _plain_number(warmup) if warmup is not None else None
    if warmup is not None:
        details.append(f"warmup_steps={warmup}")
        if isinstance(warmup, numbers.Real) and 1 <= warmup <= num_steps:
            peak = float(_to_numpy(schedule(np.float32(warmup)), "schedule(step)"))
            ax.axvline(warmup, color="C3", linestyle="--", linewidth=1.0)
            ax.plot([warmup], [peak], "o", color="C3", label=f"peak at step {warmup}: {peak:.2e}")
            ax.legend(loc="upper right")
    name = type(schedule).__name__
    default_title = f"{name}({', '.join(details)})" if details else f"{name} learning rate"
    ax.set_title(title or default_title)
    return fig


def _plain_number(value):
    """A schedule attribute (maybe a 0-d tensor or numpy scalar) as an int or float."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    value = np.asarray(value).item() if isinstance(value, (np.ndarray, np.generic)) else value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# ------------------------------------------------------------------ training curves


def _read_history_csv(path: str) -> dict[str, list[float]]:
    """Reads a CSV training log (Keras `CSVLogger` format) into columns of floats."""
    with open(path, newline="", encoding="utf-8") as file:
        reader = csv.reader(file)
        header = next(reader, None)
        if not header:
            raise ValueError(f"{path}:1: expected a header row of column names; the file is empty.")
        columns: dict[str, list[float]] = {name.strip(): [] for name in header}
        names = list(columns)
        for row in reader:
            if not row:
                continue
            line = reader.line_num
            if len(row) != len(names):
                raise ValueError(
                    f"{path}:{line}: expected {len(names)} values ({', '.join(names)}); "
                    f"received {len(row)}."
                )
            for name, text in zip(names, row, strict=True):
                text = text.strip()
                try:
                    columns[name].append(float(text) if text else math.nan)
                except ValueError:
                    raise ValueError(
                        f"{path}:{line}: column `{name}` holds {text!r}, expected a number."
                    ) from None
    return columns


def _history_columns(history) -> dict[str, np.ndarray]:
    if isinstance(history, (str, os.PathLike)):
        raw = _read_history_csv(os.fspath(history))
    elif isinstance(history, Mapping):
        raw = history
    elif isinstance(getattr(history, "history", None), Mapping):
        raw = history.history  # a keras.callbacks.History
    else:
        raise _invalid(
            "history",
            "a dict of lists, a keras History or the path of a CSV log",
            type(history).__name__,
        )
    columns = {}
    for name, values in raw.items():
        array = _to_numpy(values, f"history[{name!r}]").reshape(-1)
        columns[str(name)] = array
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"Received `history` columns of different lengths: {lengths}; every metric "
            "needs one value per epoch."
        )
    return columns


def _panel_of(name: str) -> str | None:
    base = name[4:] if name.startswith("val_") else name
    if base in ("learning_rate", "lr"):
        return "learning rate"
    if base.endswith("loss"):
        return "loss"
    if "accuracy" in base or base == "acc":
        return "accuracy"
    return None


def plot_training_curves(history, *, title: str | None = None, figsize=None) -> Figure:
    """Plots loss and accuracy per epoch, for training and validation.

    Args:
        history: a dict of per-epoch lists (`keras.callbacks.History.history`),
            a `History` itself, or the path of a CSV log with a header row
            (Keras's `CSVLogger` format) with columns among `epoch`, `loss`,
            `masked_accuracy`, `val_loss`, `val_masked_accuracy`, `learning_rate`.
            Columns ending in `loss` share the loss panel, columns containing
            `accuracy` the accuracy panel, and `learning_rate` (or `lr`) gets a
            third panel; other columns are ignored. The x-axis counts epochs
            from 1, as the training log does: the `epoch` column plus one
            (CSVLogger counts from 0), else 1, 2, ...
        title: figure title.
        figsize: figure size in inches.

    Returns:
        A `Figure` with one axes per panel present (loss, accuracy, learning
        rate), in that order.

    Raises:
        ValueError: when no column can be plotted, columns differ in length, or
            a CSV cell is not a number (naming the file and line).

    Example (`model.fit(...).history` is such a dict):

    >>> history = {"loss": [2.1, 1.4, 1.1], "val_loss": [1.9, 1.5, 1.3],
    ...            "masked_accuracy": [0.3, 0.5, 0.6]}
    >>> fig = plot_training_curves(history)
    >>> [ax.get_title() for ax in fig.axes]
    ['loss', 'accuracy']
    """
    columns = _history_columns(history)
    epochs = columns.pop("epoch", None)
    panels = _group_panels(columns, has_epoch=epochs is not None)
    num_epochs = len(next(iter(columns.values())))
    x = epochs + 1 if epochs is not None else np.arange(1, num_epochs + 1)
    fig = _new_figure(figsize or (4.6 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    marker = "o" if num_epochs <= 30 else None
    for ax, (panel, names) in zip(axes, panels.items(), strict=True):
        _draw_curves(ax, panel, x, {name: columns[name] for name in names}, marker)
    if title:
        fig.suptitle(title)
    return fig


def _group_panels(columns: Mapping[str, np.ndarray], has_epoch: bool) -> dict[str, list[str]]:
    """The column names of each panel present: loss, accuracy, learning rate, in order."""
    panels: dict[str, list[str]] = {"loss": [], "accuracy": [], "learning rate": []}
    for name in columns:
        panel = _panel_of(name)
        if panel is None:
            logger.debug("plot_training_curves ignores column %r", name)
        else:
            panels[panel].append(name)
    panels = {panel: names for panel, names in panels.items() if names}
    if not panels:
        raise _invalid(
            "history",
            "columns such as loss, masked_accuracy, val_loss, val_masked_accuracy or learning_rate",
            f"columns {sorted(columns) + (['epoch'] if has_epoch else [])}",
        )
    return panels


def _draw_curves(ax, panel: str, x, curves: Mapping[str, np.ndarray], marker) -> None:
    """One panel: training curves solid, validation (`val_`) curves dashed after them."""
    for name in sorted(curves, key=lambda n: (n.startswith("val_"), n)):
        validation = name.startswith("val_")
        ax.plot(
            x,
            curves[name],
            marker=marker,
            markersize=3,
            linestyle="--" if validation else "-",
            color="C1" if validation else "C0",
            label=name,
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel(panel)
    ax.set_title(panel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    if panel == "learning rate":
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
