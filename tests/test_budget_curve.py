"""bench/budget_curve.py without training: the train.py command it runs, reading
finished runs (resume), and the report's table and plot from small results files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import BENCH, load_bench_module

SCRIPT = BENCH / "budget_curve.py"




budget_curve = load_bench_module("budget_curve", SCRIPT)


def _write(path: Path, record) -> Path:
    path.write_text(json.dumps(record), encoding="utf-8")
    return path


def _run(minutes, seed, bleu, updates, epochs):
    return {"minutes": minutes, "seed": seed, "bleu_lc": bleu, "updates": updates,
            "epochs": epochs, "train_seconds": 60.0 * minutes}


@pytest.fixture
def results(tmp_path):
    """Two corpora (one of them in two files), and the peer."""
    ui = _write(tmp_path / "ui.json", {"corpus": "ui-es-en", "label": "ui-es-en", "runs": [
        _run(5, 0, 30.0, 3700, 4.3), _run(5, 1, 32.0, 3800, 4.4), _run(15, 0, 50.0, 15000, 17.5)]})
    ui_more = _write(tmp_path / "ui_more.json", {"corpus": "ui-es-en", "label": "ui-es-en",
                                                 "runs": [_run(15, 1, 52.0, 15100, 17.6)]})
    # The earlier format: BLEU under translate_beam4, the seed in the command.
    bible = _write(tmp_path / "bible.json", {"label": "bible", "runs": [
        {"minutes": 5, "train_seconds": 300.0, "final_step": 1400,
         "command": "taskset -c 0 python train.py --time-budget 5m --seed 2",
         "translate_beam4": {"bleu_lc_13a": 8.25}}]})
    peer = _write(tmp_path / "peer.json", {"setup": "cpu", "minutes": 45.0,
                                           "bleu": {"bleu_lc_13a": 42.59},
                                           "training": {"batches": 10748}})
    return [ui, ui_more, bible], peer


def test_the_table_gives_each_budget_the_mean_and_every_seed_with_the_peer_beside(
        results, capsys):
    files, peer = results
    assert budget_curve.main(["--from-json", *map(str, files), "--peer", str(peer),
                              "--table"]) == 0
    table = capsys.readouterr().out
    assert "| budget | mean BLEU | BLEU by seed | updates | epochs | JoeyNMT 2.3, cpu, 45 min |" \
        in table
    assert "| 5 min | 31.00 | 30.00 (seed 0); 32.00 (seed 1) | 3,700; 3,800 | 4.30; 4.40 | 42.59 |" \
        in table
    # The two files of one label make one series: 15 minutes has both seeds.
    assert "| 15 min | 51.00 | 50.00 (seed 0); 52.00 (seed 1) | 15,000; 15,100 |" in table
    assert "| 5 min | 8.25 | 8.25 (seed 2) | 1,400 | - | 42.59 |" in table
    assert table.index("**ui-es-en**") < table.index("**bible**")


def test_the_plot_is_drawn_from_results_alone_without_tensorflow(results, tmp_path):
    files, peer = results
    png = tmp_path / "curve.png"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import budget_curve; "
            "code = budget_curve.main(sys.argv[2:]); "
            "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code, str(BENCH), "--from-json",
                           *map(str, files), "--peer", str(peer), "--plot", str(png)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_plot_marks_every_seed_and_the_mean_and_no_point_has_a_text_label(
        results, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    files, peer = results
    drawn = {}
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, path: drawn.update(fig=fig))
    budget_curve.main(["--from-json", *map(str, files), "--peer", str(peer), "--plot",
                       str(tmp_path / "x.png")])
    ax = drawn["fig"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert sorted(lines["ui-es-en: each seed"].get_xdata()) == [5, 5, 15, 15]
    assert list(lines["ui-es-en (mean of seeds)"].get_ydata()) == [31.0, 51.0]
    assert list(lines["JoeyNMT 2.3, cpu, 45 min: 42.59"].get_ydata()) == [42.59, 42.59]
    assert len(ax.texts) == 0


def test_several_files_of_one_corpus_with_label_make_one_series_and_the_peer_a_point(
        tmp_path, monkeypatch, capsys):
    """Budgets measured apart (each file its own label) drawn as one curve, as the
    report's figure is; the peer named by --peer-label, marked at its minutes."""
    import matplotlib.pyplot as plt

    files = [_write(tmp_path / f"bible_{minutes}.json", {
        "corpus": "bible-es-en", "label": f"bible-es-en, {name}",
        "runs": [_run(minutes, seed, bleu, 100 * minutes, 0.1 * minutes)
                 for seed, bleu in runs]})
        for minutes, name, runs in ((5, "vocab 4000", [(0, 9.0), (1, 10.0)]),
                                    (15, "vocab 8000", [(0, 26.0)]),
                                    (45, "defaults", [(0, 31.0)]))]
    peer = _write(tmp_path / "peer.json", {"setup": "cpu", "minutes": 45.0,
                                           "bleu": {"bleu_lc_13a": 25.82}})
    drawn = {}
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, path: drawn.update(fig=fig))
    assert budget_curve.main(["--label", "ours", "--from-json", *map(str, files),
                              "--peer", str(peer), "--peer-label", "JoeyNMT 2.3, 45 min",
                              "--plot", str(tmp_path / "x.png"), "--table"]) == 0
    table = capsys.readouterr().out
    assert table.count("**") == 2 and "**ours**" in table
    assert "| 5 min | 9.50 | 9.00 (seed 0); 10.00 (seed 1) |" in table
    assert "| 45 min | 31.00 | 31.00 (seed 0) | 4,500 | 4.50 | 25.82 |" in table
    ax = drawn["fig"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ours (mean of seeds)"].get_xdata()) == [5, 15, 45]
    assert list(lines["ours (mean of seeds)"].get_ydata()) == [9.5, 26.0, 31.0]
    assert list(lines["JoeyNMT 2.3, 45 min: 25.82"].get_ydata()) == [25.82, 25.82]
    [marker] = [line for line in ax.get_lines() if list(line.get_xdata()) == [45.0]]
    assert list(marker.get_ydata()) == [25.82]
    with pytest.raises(SystemExit):
        budget_curve.main(["--from-json", str(files[0]), "--table",
                           "--peer-label", "one", "two"])


def test_report_options_need_from_json_and_a_bad_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        budget_curve.main(["--table"])
    bad = _write(tmp_path / "bad.json", {"runs": [{"seed": 0}]})
    assert budget_curve.main(["--from-json", str(bad), "--table"]) == 1
    assert "cannot read a results file" in capsys.readouterr().err


def test_the_train_command_is_train_py_pinned_with_the_budget_and_seed(tmp_path):
    args = budget_curve.parse_args(["--corpus", str(tmp_path / "bible"), "--core", "1",
                                    "--train-args", "--epochs 40"])
    command = budget_curve.train_command(args, args.corpus[0], 15.0, 2, tmp_path / "run")
    assert command[:3] == ["taskset", "-c", "1"]
    assert command[4].endswith("train.py")
    assert command[5:] == [
        "--data", str(tmp_path / "bible" / "train.tsv"),
        "--valid", str(tmp_path / "bible" / "valid.tsv"),
        "--test", str(tmp_path / "bible" / "test.tsv"),
        "--time-budget", "15m", "--seed", "2", "--output-dir", str(tmp_path / "run"),
        "--epochs", "40"]


def test_finished_runs_are_read_from_their_metrics_not_trained_again(tmp_path, monkeypatch):
    corpus = tmp_path / "ui-es-en"
    corpus.mkdir()
    for split in ("train", "valid", "test"):
        (corpus / f"{split}.tsv").write_text("hola\thello\n", encoding="utf-8")
    run = tmp_path / "runs" / "ui-es-en_5min_s0"
    run.mkdir(parents=True)
    _write(run / "config.json", {"steps_per_epoch": 858, "precision": "mixed_bfloat16"})
    _write(run / "metrics.json", {"final_step": 3721, "train_seconds": 302.6, "test": {
        "beam_size": 4, "bleu": 33.2406, "bleu_lowercase": 33.7306, "exact_match": 0.156}})
    monkeypatch.setattr(budget_curve.subprocess, "run", lambda *a, **k: pytest.fail("trained"))
    monkeypatch.setattr(budget_curve, "machine", lambda: {"cpu_model": "test"})
    out = tmp_path / "out.json"
    assert budget_curve.main(["--corpus", str(corpus), "--budgets", "5", "--seeds", "0",
                              "--runs", str(tmp_path / "runs"), "--json", str(out)]) == 0
    [record] = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert (record["updates"], record["epochs"], record["bleu_lc"], record["bleu_cased"]) == (
        3721, 4.34, 33.73, 33.24)
    assert record["seed"] == 0 and record["command_wall_seconds"] is None
    assert "--seed 0" in record["command"] and "--time-budget 5m" in record["command"]


def test_each_corpus_has_its_own_results_file_and_json_names_only_one(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for name, bleu in (("ui-es-en", 33.7306), ("bible-es-en", 8.4179)):
        corpus = tmp_path / name
        corpus.mkdir()
        for split in ("train", "valid", "test"):
            (corpus / f"{split}.tsv").write_text("hola\thello\n", encoding="utf-8")
        run = runs / f"{name}_5min_s1"
        run.mkdir(parents=True)
        _write(run / "config.json", {"steps_per_epoch": 100})
        _write(run / "metrics.json", {"final_step": 250, "train_seconds": 300.0, "test": {
            "bleu": bleu - 0.5, "bleu_lowercase": bleu}})
    monkeypatch.setattr(budget_curve, "machine", lambda: {})
    monkeypatch.setattr(budget_curve.subprocess, "run", lambda *a, **k: pytest.fail("trained"))
    corpora = [str(tmp_path / "ui-es-en"), str(tmp_path / "bible-es-en")]
    assert budget_curve.main(["--corpus", *corpora, "--budgets", "5", "--seeds", "1",
                              "--runs", str(runs)]) == 0
    bible = json.loads((runs / "bible-es-en.json").read_text(encoding="utf-8"))
    assert bible["corpus"] == "bible-es-en" and bible["runs"][0]["bleu_lc"] == 8.42
    assert json.loads((runs / "ui-es-en.json").read_text(encoding="utf-8"))["runs"][0][
        "epochs"] == 2.5
    with pytest.raises(SystemExit):
        budget_curve.main(["--corpus", *corpora, "--json", str(tmp_path / "one.json")])
