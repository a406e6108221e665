"""Tests of transformer.rundir: the run directory checks and the JSON files' errors."""

from __future__ import annotations

import json

import pytest

from transformer.rundir import (
    CONFIG_FILE,
    MODEL_FILE,
    REQUIRED_FOR_TRANSLATION,
    TOKENIZERS_DIR,
    RunDirError,
    check_run_dir,
    read_json,
    write_json_atomic,
)


def test_missing_run_dir(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(RunDirError) as error:
        check_run_dir(missing)
    assert str(error.value) == f"Run directory {str(missing)!r} does not exist."


def test_a_file_where_the_run_dir_should_be(tmp_path):
    path = tmp_path / "run"
    path.write_text("not a directory")
    with pytest.raises(RunDirError) as error:
        check_run_dir(path)
    assert str(error.value) == f"Run directory {str(path)!r} is not a directory."


def test_incomplete_run_dir_names_every_missing_file_in_order(tmp_path):
    (tmp_path / TOKENIZERS_DIR).mkdir()
    with pytest.raises(RunDirError) as error:
        check_run_dir(tmp_path)
    message = str(error.value)
    assert message.startswith(
        f"Run directory {str(tmp_path)!r} is incomplete: missing {CONFIG_FILE}, {MODEL_FILE}. "
    )
    assert "--resume" in message
    assert TOKENIZERS_DIR not in message.split("missing ")[1].split(".")[0]


def test_complete_run_dir_is_returned_as_a_path(tmp_path):
    for name in REQUIRED_FOR_TRANSLATION:
        (tmp_path / name).mkdir()
    assert check_run_dir(str(tmp_path)) == tmp_path
    # Only what is asked for is required.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_run_dir(empty, required=()) == empty


def test_run_dir_error_is_a_value_error():
    assert issubclass(RunDirError, ValueError)


def test_read_json_of_a_missing_file(tmp_path):
    path = tmp_path / CONFIG_FILE
    with pytest.raises(RunDirError) as error:
        read_json(path)
    assert str(error.value) == f"{str(path)!r} does not exist."


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "Expecting value: line 1 column 1 (char 0)"),
        ('{"epochs": 3,', "Expecting property name enclosed in double quotes: line 1 column 14"),
        ('{"epochs": 3}\n{"epochs": 4}\n', "Extra data: line 2 column 1 (char 14)"),
    ],
)
def test_read_json_of_invalid_json_names_the_file_and_the_position(tmp_path, text, detail):
    path = tmp_path / CONFIG_FILE
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RunDirError) as error:
        read_json(path)
    assert str(error.value).startswith(f"{str(path)!r} is not valid JSON: {detail}")


def test_write_json_atomic_round_trips_sorted_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("old", encoding="utf-8")
    write_json_atomic(path, {"b": 1, "a": [1.5, "ü"]})
    assert read_json(path) == {"a": [1.5, "ü"], "b": 1}
    text = path.read_text(encoding="utf-8")
    assert text == json.dumps({"a": [1.5, "ü"], "b": 1}, indent=2, sort_keys=True) + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_write_json_atomic_into_a_missing_directory_raises_and_writes_nothing(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_json_atomic(tmp_path / "missing" / CONFIG_FILE, {"a": 1})
    assert list(tmp_path.iterdir()) == []
