"""Tests of transformer.run.distribute: TF_CONFIG parsing, strategy choice errors,
logical CPU devices, and which process of a cluster writes the run directory."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf

from transformer.run.distribute import (
    configure_cpu_devices,
    is_chief,
    make_strategy,
    parse_tf_config,
    worker_name,
)

TWO_WORKERS = {"worker": ["host1:1", "host2:1"]}
WITH_CHIEF = {"chief": ["host0:1"], "worker": ["host1:1", "host2:1"]}
FULL_CLUSTER = {
    "chief": ["host0:1"],
    "worker": ["host1:1", "host2:1"],
    "ps": ["host3:1"],
    "evaluator": ["host4:1"],
}


class FakeStrategy:
    """What `is_chief` and `worker_name` read of a strategy: its cluster resolver."""

    def __init__(self, cluster, task_type, task_id):
        self.cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(cluster), task_type=task_type, task_id=task_id
        )


# ------------------------------------------------------------------ TF_CONFIG


def test_tf_config_unset_or_empty_is_none(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert parse_tf_config() is None
    monkeypatch.setenv("TF_CONFIG", "")
    assert parse_tf_config() is None


def test_tf_config_is_parsed(monkeypatch):
    config = {"cluster": TWO_WORKERS, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert parse_tf_config() == config


def test_tf_config_that_is_not_json_names_the_variable_and_the_json_error(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{'cluster': {}}")  # single quotes: not JSON
    with pytest.raises(ValueError) as error:
        parse_tf_config()
    message = str(error.value)
    assert message.startswith("The TF_CONFIG environment variable is not valid JSON: ")
    assert "Expecting property name enclosed in double quotes: line 1 column 2" in message
    assert isinstance(error.value.__cause__, json.JSONDecodeError)


@pytest.mark.parametrize(
    "raw",
    [
        '["cluster", "task"]',
        '"worker"',
        json.dumps({"cluster": TWO_WORKERS}),
        json.dumps({"task": {"type": "worker", "index": 0}}),
    ],
)
def test_tf_config_without_cluster_and_task_shows_the_expected_shape(monkeypatch, raw):
    monkeypatch.setenv("TF_CONFIG", raw)
    with pytest.raises(ValueError) as error:
        parse_tf_config()
    message = str(error.value)
    assert message.startswith('TF_CONFIG must be a JSON object with "cluster" and "task", e.g. ')
    assert '"task": {"type": "worker", "index": 0}}' in message


# ------------------------------------------------------------------ make_strategy


def test_multi_worker_without_tf_config_says_what_to_set(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError) as error:
        make_strategy("multi-worker")
    message = str(error.value)
    assert message.startswith("--strategy multi-worker needs the TF_CONFIG environment variable")
    assert 'TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}' in message


def test_multi_worker_with_malformed_tf_config_is_refused_before_tensorflow_acts(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "not json")
    with pytest.raises(ValueError, match="^The TF_CONFIG environment variable is not valid JSON"):
        make_strategy("multi-worker")


@pytest.mark.parametrize("name", ["Mirrored", "multi_worker", "", "tpu"])
def test_unknown_strategy_lists_the_known_ones(name):
    with pytest.raises(ValueError) as error:
        make_strategy(name)
    assert str(error.value) == (
        "Received an invalid value for argument `strategy`, expected one of "
        f"['default', 'mirrored', 'multi-worker']. Received: strategy={name!r}"
    )


def test_default_strategy_is_tensorflows_default():
    strategy = make_strategy("default")
    assert strategy is tf.distribute.get_strategy()
    assert strategy.num_replicas_in_sync == 1
    assert is_chief(strategy) and worker_name(strategy) == "chief"


# ------------------------------------------------------------------ logical CPUs


@pytest.mark.parametrize("count", [-1, 2.0, "2"])
def test_invalid_cpu_device_counts_are_refused(count):
    with pytest.raises(ValueError) as error:
        configure_cpu_devices(count)
    assert str(error.value) == (
        "Received an invalid value for argument `cpu_devices`, expected a positive "
        f"integer. Received: cpu_devices={count!r}"
    )


def test_cpu_devices_cannot_change_once_tensorflow_runs():
    tf.constant(1.0)  # TensorFlow has created its devices
    existing = len(tf.config.list_logical_devices("CPU"))
    configure_cpu_devices(existing)  # asking for what exists is fine
    configure_cpu_devices(None)
    configure_cpu_devices(1)
    with pytest.raises(RuntimeError) as error:
        configure_cpu_devices(existing + 2)
    assert str(error.value) == (
        f"Cannot split the CPU into {existing + 2} logical devices: TensorFlow has already "
        f"created {existing}. Set the devices before running any TensorFlow op."
    )
    assert len(tf.config.list_logical_devices("CPU")) == existing


# ------------------------------------------------------------------ chief


@pytest.mark.parametrize(
    ("cluster", "task_type", "task_id", "chief", "name"),
    [
        (WITH_CHIEF, "chief", 0, True, "chief 0"),
        (FULL_CLUSTER, "chief", 0, True, "chief 0"),
        (TWO_WORKERS, "worker", 0, True, "worker 0"),  # no chief: worker 0 is the chief
        (TWO_WORKERS, "worker", 1, False, "worker 1"),
        (WITH_CHIEF, "worker", 0, False, "worker 0"),  # a chief exists: worker 0 is not it
        (WITH_CHIEF, "worker", 1, False, "worker 1"),
        (FULL_CLUSTER, "evaluator", 0, False, "evaluator 0"),
        (FULL_CLUSTER, "ps", 0, False, "ps 0"),
        ({"worker": ["host1:1"], "evaluator": ["host4:1"]}, "evaluator", 0, False, "evaluator 0"),
    ],
)
def test_only_the_chief_writes(cluster, task_type, task_id, chief, name):
    strategy = FakeStrategy(cluster, task_type, task_id)
    assert is_chief(strategy) is chief
    assert worker_name(strategy) == name


@pytest.mark.parametrize("task_type", [None, ""])
def test_a_resolver_without_a_task_is_the_chief(task_type):
    strategy = FakeStrategy(TWO_WORKERS, task_type, 1)
    assert is_chief(strategy) is True
    assert worker_name(strategy) == "chief"


def test_a_strategy_without_a_resolver_is_the_chief():
    class Plain:
        pass

    assert is_chief(Plain()) is True
    assert worker_name(Plain()) == "chief"
