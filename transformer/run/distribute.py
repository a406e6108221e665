"""Distribution strategies for training: one device, several devices, several machines.

- `default`: TensorFlow's default strategy (one device).
- `mirrored`: `tf.distribute.MirroredStrategy`, synchronous data parallelism over
  the GPUs of this machine, or over its logical CPU devices when there is no GPU
  (see `cpu_devices`, mostly useful for testing).
- `multi-worker`: `tf.distribute.MultiWorkerMirroredStrategy`, synchronous data
  parallelism over several processes or machines, described by the `TF_CONFIG`
  environment variable (https://www.tensorflow.org/guide/distributed_training).

Every worker of a multi-worker run computes the same updates; only the chief
(worker 0, or the task of type "chief") writes the run directory. The others
write their checkpoints to a temporary directory, as TensorFlow's guide asks,
because saving is a collective step every worker takes part in.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import tensorflow as tf

from transformer._validation import check_positive_int
from transformer.constants import DISTRIBUTION_STRATEGIES

logger = logging.getLogger(__name__)


def configure_cpu_devices(count: int | None) -> None:
    """Splits the first physical CPU into `count` logical devices.

    Must run before TensorFlow creates its devices (before any tensor op).
    Lets `mirrored` run on a machine without GPUs, e.g. in tests.
    """
    if not count or count == 1:
        return
    check_positive_int("cpu_devices", count)
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError as err:  # devices already initialized
        existing = len(tf.config.list_logical_devices("CPU"))
        if existing != count:
            raise RuntimeError(
                f"Cannot split the CPU into {count} logical devices: TensorFlow has already "
                f"created {existing}. Set the devices before running any TensorFlow op."
            ) from err


def parse_tf_config() -> dict | None:
    """The parsed `TF_CONFIG`, or None when it is not set; a ValueError when malformed."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        tf_config = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ValueError(f"The TF_CONFIG environment variable is not valid JSON: {err}") from err
    if not isinstance(tf_config, dict) or "cluster" not in tf_config or "task" not in tf_config:
        raise ValueError(
            'TF_CONFIG must be a JSON object with "cluster" and "task", e.g. '
            '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
            '"task": {"type": "worker", "index": 0}}.'
        )
    return tf_config


def make_strategy(name: str = "default", cpu_devices: int | None = None) -> tf.distribute.Strategy:
    """The `tf.distribute.Strategy` called `name`; see the module docstring.

    Create it first thing in the process: `multi-worker` and `cpu_devices` must
    act before TensorFlow initializes its runtime.

    Args:
        name: one of `DISTRIBUTION_STRATEGIES`.
        cpu_devices: split the CPU into this many logical devices (for `mirrored`
            on a machine without GPUs).

    Returns:
        The strategy.
    """
    if name not in DISTRIBUTION_STRATEGIES:
        raise ValueError(
            f"Received an invalid value for argument `strategy`, expected one of "
            f"{list(DISTRIBUTION_STRATEGIES)}. Received: strategy={name!r}"
        )
    if name == "multi-worker":
        tf_config = parse_tf_config()
        if tf_config is None:
            raise ValueError(
                "--strategy multi-worker needs the TF_CONFIG environment variable, which "
                "lists the workers and names this one, e.g. "
                'TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                '"task": {"type": "worker", "index": 0}}\'.'
            )
        configure_cpu_devices(cpu_devices)
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        logger.info(
            "Multi-worker training: %d workers, %d replicas in sync; this is %s %d.",
            len(tf_config["cluster"].get("worker", [])) + len(tf_config["cluster"].get("chief", [])),
            strategy.num_replicas_in_sync,
            tf_config["task"].get("type"),
            tf_config["task"].get("index", 0),
        )
        return strategy
    configure_cpu_devices(cpu_devices)
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        cross_device_ops = None if gpus else tf.distribute.ReductionToOneDevice()
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=cross_device_ops)
        logger.info("Mirrored training on %d devices: %s", len(devices), ", ".join(devices))
        return strategy
    return tf.distribute.get_strategy()


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run directory: always, except on the
    non-chief workers of a multi-worker run."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    if task_type == "worker":
        cluster = resolver.cluster_spec().as_dict()
        return "chief" not in cluster and task_id == 0
    return False


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` spans several processes (`multi-worker`)."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def worker_sum(strategy: tf.distribute.Strategy):
    """A function from this worker's float64 values to their sums over all the
    workers, each worker counted once: a collective every worker must call at
    the same point of its run, in the same order as the others."""
    local_replicas = len(strategy.extended.worker_devices)

    @tf.function
    def total(values):
        per_replica = strategy.run(lambda: values / local_replicas)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return lambda values: total(tf.constant(values, tf.float64)).numpy().tolist()


def chief_clock(strategy: tf.distribute.Strategy):
    """What makes the workers of a multi-worker run count one time: a function
    from this worker's elapsed seconds to the chief's, or None where there is
    one process.

    Every worker calls it at the same points (after each step and epoch, from
    `TrainingClock`); only the chief contributes its seconds to the sum.
    Workers that kept their own clocks would stop at a time budget after
    different steps (one validating while another steps) and would give the
    learning-rate schedule different progress.
    """
    if not is_multi_worker(strategy):
        return None
    total, own = worker_sum(strategy), 1.0 if is_chief(strategy) else 0.0
    return lambda seconds: total([seconds * own])[0]


def wait_for_each_other(strategy: tf.distribute.Strategy, failed: bool = False) -> int:
    """Returns once every worker of a multi-worker run has called it: how many
    of them called it `failed`. The chief calls it when its data are ready
    (or could not be made), the other workers before they read them
    (`link_chief_data`). One process: returns at once."""
    if not is_multi_worker(strategy):
        return 0
    return round(worker_sum(strategy)([1.0 if failed else 0.0])[0])


def check_same_data(strategy: tf.distribute.Strategy, digest: str) -> None:
    """Raises a one-line ValueError unless every worker of a multi-worker run
    holds the data (tokenizers and training pairs) of the same `digest`, a hex
    string: a worker that made its own, or linked a stale run, would train on
    other tokens. The sums of a 24-bit value and of its square agree with one
    value held by all only when all hold it."""
    if not is_multi_worker(strategy):
        return
    value = float(int(digest[:6], 16))
    workers, total, squares = (round(v) for v in worker_sum(strategy)([1.0, value, value**2]))
    if workers * squares != total * total:
        raise ValueError("The workers hold different data or vocabularies: each must see "
                         "the same corpus and options, and none an older run's tokens/ at the "
                         "run directory's path.")


def _link_or_copy(source, target):
    """A hard link, or a copy across file systems (a temporary folder of its own)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def link_chief_data(run_dir: Path, write_dir: Path, names) -> bool:
    """Hard-links the chief's data folders `names` of `run_dir` (its scan and
    token files) into this worker's `write_dir` (copies them across file
    systems), so that the worker opens them as a resumed run would, instead
    of scanning, learning the vocabulary and tokenizing the corpus again.
    The files are only read: every writer of those folders replaces a file
    rather than writing into it.

    Returns:
        False when the chief's folders cannot be seen or linked from here
        (workers on other machines without a shared file system): this
        worker then makes its own.
    """
    targets = [Path(write_dir) / name for name in names]
    try:
        for name, target in zip(names, targets, strict=True):
            source = Path(run_dir) / name
            if not source.is_dir():
                return False
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, copy_function=_link_or_copy)
    except OSError as error:
        for target in targets:  # nothing half linked
            shutil.rmtree(target, ignore_errors=True)
        logger.info("The chief's %s cannot be linked here (%s): this worker makes its own.",
                    run_dir, error)
        return False
    logger.info("Linked the chief's %s from %s.", " and ".join(names), run_dir)
    return True


def worker_name(strategy: tf.distribute.Strategy) -> str:
    """`"worker 1"` and the like for logs; `"chief"` for the process that writes."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return "chief"
    return f"{resolver.task_type} {resolver.task_id}"
