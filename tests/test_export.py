"""Tests of transformer/export.py: the translator exported as a SavedModel."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf
from translate_helpers import copy_run

from transformer.translate import export_translator

RELOAD_SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizers' ops)
    sentences = json.loads(sys.argv[2])
    results = []
    for export_dir in json.loads(sys.argv[1]):
        translator = tf.saved_model.load(export_dir)
        batch = [t.decode() for t in translator(tf.constant(sentences)).numpy()]
        one = translator(tf.constant(sentences[0])).numpy().decode()
        beam = translator.translate(tf.constant(sentences), tf.constant(30), tf.constant(4),
                                    tf.constant(0.6)).numpy()
        def sample(seed, top_k):
            return [t.decode() for t in translator.sample(
                tf.constant(sentences), tf.constant(30), tf.constant(seed, tf.int64),
                tf.constant(1.5), tf.constant(top_k), tf.constant(0.9)).numpy()]
        results.append({"batch": batch, "one": one, "beam": [t.decode() for t in beam],
                        "top1": sample(5, 1), "seeded": sample(5, 0) == sample(5, 0)})
    imported = any(m.split(".")[0] == "transformer" for m in sys.modules)
    print(json.dumps({"results": results, "imported_transformer": imported}))
""")


@pytest.mark.slow  # a fresh Python process loads TensorFlow
def test_export_reloads_in_a_fresh_process_with_the_same_translations(
    tiny_run, translator, run_dir, test_pairs, tmp_path
):
    # train.py exported the tiny run at the end of training ...
    assert tiny_run.export_dir is not None
    assert (run_dir / "export" / "saved_model.pb").is_file()
    # ... and from a run directory, the export goes to <run_dir>/export.
    copy = copy_run(run_dir, tmp_path / "run")
    export_dir = export_translator(copy)
    assert export_dir == copy / "export" and (export_dir / "saved_model.pb").is_file()
    sentences = [source for source, _ in test_pairs[:5]] + ["", "o gato xyzzyq"]
    dirs = [str(run_dir / "export"), str(export_dir)]
    done = subprocess.run(
        [sys.executable, "-c", RELOAD_SCRIPT, json.dumps(dirs), json.dumps(sentences)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reloaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert not reloaded["imported_transformer"]
    expected = {
        "batch": [r.text for r in translator(sentences)],
        "one": translator(sentences[0]).text,
        "beam": [r.text for r in translator(sentences, max_length=30, beam_size=4, alpha=0.6)],
        "top1": [r.text for r in translator(sentences, max_length=30)],
        "seeded": True,
    }
    assert expected["batch"][5] == ""
    for result in reloaded["results"]:
        assert result == expected


def test_export_needs_a_directory_for_a_translator(translator):
    with pytest.raises(ValueError, match="export_dir"):
        export_translator(translator)


@pytest.mark.slow  # a Jupyter kernel starts
def test_export_from_a_jupyter_kernel(translator, run_dir, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    repo = str(Path(__file__).resolve().parents[1])
    export_dir = tmp_path / "nb_export"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {repo!r})
        from transformer.translate import Translator, export_translator
        translator = Translator.from_run({str(run_dir)!r})
        export_translator(translator, {str(export_dir)!r})
        print("exported")
    """)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = notebook.cells[0].outputs
    assert any("exported" in output.get("text", "") for output in outputs), outputs
    reloaded = tf.saved_model.load(str(export_dir))
    sentence = "o gato come o bolo"
    assert reloaded(tf.constant(sentence)).numpy().decode() == translator(sentence).text

