"""Tests of transformer/decoding/saved_model.py: the translator exported as a SavedModel."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import pytest
import tensorflow as tf
from translate_helpers import copy_run

from transformer import Transformer
from transformer.decoding.strategies import Beam, Greedy, Sample
from transformer.decoding.translator import Translator, export_translator

# One fresh process for both tests that need one (each start loads TensorFlow):
# first the README's snippet, as a user runs it (its output kept apart), then
# the reloads of the exports.
RELOAD_SCRIPT = textwrap.dedent("""
    import contextlib, io, json, sys, traceback
    readme_output, readme_error = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(readme_output):
            exec(compile(sys.argv[3], "README.md", "exec"), {"__name__": "__main__"})
    except Exception:
        readme_error = traceback.format_exc()
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
    print(json.dumps({"readme": readme_output.getvalue(), "readme_error": readme_error,
                      "results": results, "imported_transformer": imported}))
""")


@pytest.fixture(scope="module")
def fresh_process(run_dir, test_pairs, tmp_path_factory):
    """The tiny run exported again from a copy of its directory, then the
    fresh process of `RELOAD_SCRIPT`: `(copy, export_dir, sentences, output)`."""
    tmp_path = tmp_path_factory.mktemp("fresh_process")
    copy = copy_run(run_dir, tmp_path / "run")
    export_dir = export_translator(copy)
    sentences = [source for source, _ in test_pairs[:5]] + ["", "o gato xyzzyq"]
    dirs = [str(run_dir / "export"), str(export_dir)]
    readme = _readme_savedmodel_snippet().replace("runs/toy", str(run_dir))
    done = subprocess.run(
        [sys.executable, "-c", RELOAD_SCRIPT, json.dumps(dirs), json.dumps(sentences), readme],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return copy, export_dir, sentences, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh Python process loads TensorFlow
def test_export_reloads_in_a_fresh_process_with_the_same_translations(
    tiny_run, translator, run_dir, fresh_process
):
    # train.py exported the tiny run at the end of training ...
    assert tiny_run.export_dir is not None
    assert (run_dir / "export" / "saved_model.pb").is_file()
    # ... and from a run directory, the export goes to <run_dir>/export.
    copy, export_dir, sentences, reloaded = fresh_process
    assert export_dir == copy / "export" and (export_dir / "saved_model.pb").is_file()
    assert not reloaded["imported_transformer"]
    expected = {
        "batch": [r.text for r in translator(sentences)],
        "one": translator(sentences[0]).text,
        "beam": [r.text for r in translator(sentences, max_length=30, search=Beam(4, 0.6))],
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
        from transformer.decoding.translator import Translator, export_translator
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



def test_the_export_trims_and_samples_as_the_translator_does(translator, test_pairs, tmp_path):
    """An export whose output cap (12) is below the model's max_length (64):
    inputs are trimmed at the model's length, not the cap; the default call
    runs the export's strategy; `sample` draws what `Translator` draws for
    the same seed."""
    keras.utils.set_random_seed(1)
    model = Transformer(num_layers=1, d_model=16, num_heads=2, dff=32, max_length=64,
                        input_vocab_size=translator.transformer.input_vocab_size,
                        target_vocab_size=translator.transformer.target_vocab_size)
    model.build(((None, None), (None, None)))
    small = Translator(translator.tokenizers, model, max_length=12)
    sentences = [test_pairs[1][0], " ".join([test_pairs[0][0]] * 2), test_pairs[2][0],
                 " ".join([test_pairs[3][0]] * 30)]
    lengths = [len(r.input_tokens) for r in small(sentences, return_attention=False)]
    assert 12 < lengths[1] < 64 and lengths[3] == 64  # trimmed at the model's length only
    exported = tf.saved_model.load(str(export_translator(small, tmp_path / "export",
                                                         search=Beam(3))))

    def texts(tensor):
        return [t.decode() for t in tensor.numpy()]

    assert texts(exported(tf.constant(sentences))) == [
        r.text for r in small(sentences, search=Beam(3), return_attention=False)]
    # `translate(sentences, max_length, beam_size, alpha)`: a beam of 1 is greedy
    # search, every wider beam is that beam.
    pairs = [source for source, _ in test_pairs[:12]]
    by_beam = {}
    for beam in (1, 2, 5):
        by_beam[beam] = [r.text for r in small(
            pairs, search=Beam(beam, 0.6) if beam > 1 else Greedy(), return_attention=False)]
        assert texts(exported.translate(tf.constant(pairs), tf.constant(12), tf.constant(beam),
                                        tf.constant(0.6))) == by_beam[beam], beam
    assert by_beam[1] != by_beam[2] != by_beam[5]  # so the comparisons can fail
    samples = []
    for seed in (1, 2):
        sampled = texts(exported.sample(tf.constant(sentences), tf.constant(12),
                                        tf.constant(seed, tf.int64), tf.constant(1.0),
                                        tf.constant(0), tf.constant(1.0)))
        assert sampled == [r.text for r in small(sentences, search=Sample(seed=seed),
                                                 return_attention=False)]
        samples.append(sampled)
    assert samples[0] != samples[1]  # the seed matters, so the comparison can fail


def _readme_savedmodel_snippet():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    after = text.split("`runs/toy/export` is a\nSavedModel", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.slow  # a fresh Python process loads TensorFlow
def test_the_readmes_savedmodel_snippet_loads_and_translates(translator, fresh_process):
    """The snippet ran first in `fresh_process`, after only the standard library."""
    output = fresh_process[3]
    assert output["readme_error"] is None, output["readme_error"][-3000:]
    assert output["readme"].strip() == translator("o gato preto come o bolo").text
