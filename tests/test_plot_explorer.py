"""Tests of transformer.plot.explorer: the page's data and checks, and the page in a real
browser (headless Chromium through Playwright; skipped, saying why, without them)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil

import numpy as np
import pytest

from transformer.plot.explorer import (
    ATTENTION_KINDS,
    attention_axes,
    attention_explorer_html,
    show_attention_explorer,
)

SOURCE = ["[START]", "▁o", "▁gato", "▁preto", "▁come", "▁o", "▁bolo", "[END]"]
TARGET = ["[START]", "▁the", "▁black", "▁cat", "▁eats", "▁the", "▁cake", "[END]"]
LAYERS, HEADS = 2, 3
STRONG, WEAK = 0.75, 0.25


def _strong_key(layer: int, head: int, query: int, num_keys: int) -> int:
    return (query + head + layer) % num_keys


def _weights(num_queries: int, num_keys: int, layer: int, causal: bool = False) -> np.ndarray:
    """`(heads, q, k)`: each row gives STRONG to one key and WEAK to the next (or all to one)."""
    weights = np.zeros((HEADS, num_queries, num_keys))
    for head in range(HEADS):
        for query in range(num_queries):
            allowed = query + 1 if causal else num_keys
            strong = _strong_key(layer, head, query, allowed)
            if allowed == 1:
                weights[head, query, 0] = 1.0
                continue
            weights[head, query, strong] = STRONG
            weights[head, query, (strong + 1) % allowed] = WEAK
    return weights


def _weights_dict(batch: bool = False) -> dict[str, np.ndarray]:
    nq, nk = len(TARGET) - 1, len(SOURCE)
    weights = {}
    for layer in range(LAYERS):
        weights[f"encoder_layer{layer + 1}"] = _weights(nk, nk, layer)
        weights[f"decoder_layer{layer + 1}_block1"] = _weights(nq, nq, layer, causal=True)
        weights[f"decoder_layer{layer + 1}_block2"] = _weights(nq, nk, layer)
    if batch:  # a batch of two sentences, the one wanted second
        weights = {k: np.stack([np.full_like(v, 1.0 / v.shape[-1]), v]) for k, v in weights.items()}
    return weights


def _page_data(page: str) -> dict:
    match = re.search(r'<script type="application/json" class="txe-data">(.*?)</script>', page,
                      re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


def _explorer(**kwargs) -> str:
    return attention_explorer_html(
        _weights_dict(), SOURCE, TARGET, sentence="o gato preto come o bolo",
        translation="the black cat eats the cake", model_name="runs/toy", **kwargs,
    )


# ---------------------------------------------------------------------------
# The page's content, without a browser
# ---------------------------------------------------------------------------


def test_axes_follow_the_translators_tokens():
    assert attention_axes("encoder_layer1", SOURCE, TARGET) == (SOURCE, SOURCE)
    assert attention_axes("decoder_layer2_block1", SOURCE, TARGET) == (TARGET[:-1], TARGET[1:])
    assert attention_axes("decoder_layer1_block2", SOURCE, TARGET, 7) == (SOURCE, TARGET[1:])
    # Target tokens as many as the queries name queries and keys alike.
    assert attention_axes("decoder_layer1_block1", SOURCE, TARGET[:-1], 7) == (
        TARGET[:-1], TARGET[:-1])


def test_page_holds_the_weights_tokens_and_texts_in_the_papers_order():
    page = _explorer()
    for text in ("o gato preto come o bolo", "the black cat eats the cake", "runs/toy"):
        assert text in page
    data = _page_data(page)
    assert [kind["title"] for kind in data["kinds"]] == [title for _, title, _, _ in ATTENTION_KINDS]
    assert [kind["title"] for kind in data["kinds"]][0] == "encoder-decoder attention"
    weights = _weights_dict()
    for kind, (pattern, _, query_side, key_side) in zip(data["kinds"], ATTENTION_KINDS,
                                                        strict=True):
        assert (kind["layers"], kind["heads"]) == (LAYERS, HEADS)
        assert (kind["querySide"], kind["keySide"]) == (query_side, key_side)
        keys, queries = attention_axes(pattern.format(i=1), SOURCE, TARGET, 7)
        assert (kind["keys"], kind["queries"]) == (keys, queries)
        stored = np.frombuffer(base64.b64decode(kind["weights"]), np.uint8) / kind["levels"]
        expected = np.stack([weights[pattern.format(i=i + 1)] for i in range(LAYERS)])
        np.testing.assert_allclose(stored.reshape(expected.shape), expected, atol=0.5 / 255)


def test_page_is_self_contained_and_small():
    page = _explorer()
    assert not re.search(r"\b(src|href)\s*=|url\(|@import|fetch\(|XMLHttpRequest|require\(", page)
    assert re.findall(r"https?://[^\s\"']+", page) == ["http://www.w3.org/2000/svg"]  # a namespace
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert len(page.encode("utf-8")) < 60_000
    # A tutorial-sized model on a 40-token sentence stays within a few hundred kB.
    big = {f"encoder_layer{i}": np.full((8, 40, 40), 1 / 40) for i in range(1, 5)}
    big |= {f"decoder_layer{i}_block{b}": np.full((8, 40, 40), 1 / 40)
            for i in range(1, 5) for b in (1, 2)}
    tokens = [f"w{i}" for i in range(40)]
    assert len(attention_explorer_html(big, tokens, tokens)) < 300_000


def test_each_page_has_its_own_id_and_a_fragment_has_no_document():
    first, second = _explorer(full_page=False), _explorer(full_page=False)
    ids = [re.search(r'<div class="txe" id="([^"]+)"', page).group(1) for page in (first, second)]
    assert ids[0] != ids[1]
    assert first.startswith('<div class="txe"') and "<html" not in first


def test_tokens_and_texts_are_escaped():
    page = attention_explorer_html(_weights_dict(), SOURCE[:-1] + ["</script><b>"], TARGET,
                                   sentence="<i>x</i>", translation="a & b")
    assert "<i>x</i>" not in page and "&lt;i&gt;x&lt;/i&gt;" in page and "a &amp; b" in page
    assert "</script><b>" not in page
    assert _page_data(page)["kinds"][0]["keys"][-1] == "</script><b>"


def test_batched_weights_take_the_chosen_sentence_and_bytes_tokens_decode():
    page = attention_explorer_html(_weights_dict(batch=True), [t.encode() for t in SOURCE],
                                   np.array([t.encode() for t in TARGET]), batch_index=1)
    assert _page_data(page) ["kinds"] == _page_data(_explorer())["kinds"]


def test_a_subset_of_kinds_is_enough():
    weights = {k: v for k, v in _weights_dict().items() if k.startswith("encoder")}
    data = _page_data(attention_explorer_html(weights, SOURCE, TARGET))
    assert [kind["title"] for kind in data["kinds"]] == ["encoder self-attention"]


@pytest.mark.parametrize("change,message", [
    (lambda w: w.update(decoder_layer3_block9=w["encoder_layer1"]), "unknown attention-weights key"),
    (lambda w: w.pop("encoder_layer1"), r"layers \[2\] of encoder_layer\{i\}"),
    (lambda w: w.update(encoder_layer2=w["encoder_layer2"][:, :5]), r"expected \(3, 8, 8\)"),
    (lambda w: w.update(encoder_layer2=w["encoder_layer2"][0]), r"expected \(heads, seq_q"),
    (lambda w: w.update(encoder_layer1=w["encoder_layer1"] * 3), "outside \\[0, 1\\]"),
    (lambda w: w.update(encoder_layer1=w["encoder_layer1"] * np.nan), "outside \\[0, 1\\]"),
    (lambda w: w.clear(), "no attention weights"),
])
def test_bad_weights_are_named(change, message):
    weights = _weights_dict()
    change(weights)
    with pytest.raises(ValueError, match=message):
        attention_explorer_html(weights, SOURCE, TARGET)


def test_bad_tokens_and_batch_index_are_named():
    with pytest.raises(ValueError, match=r"`tokens`"):
        attention_explorer_html(_weights_dict(), SOURCE, "the black cat")
    with pytest.raises(ValueError, match="expected \\(3, 7, 7\\)"):  # one source token short
        attention_explorer_html(_weights_dict(), SOURCE[:-1], TARGET)
    with pytest.raises(ValueError, match="batch_index=2"):
        attention_explorer_html(_weights_dict(batch=True), SOURCE, TARGET, batch_index=2)


def test_show_displays_the_fragment(monkeypatch):
    pytest.importorskip("IPython")
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    assert show_attention_explorer(_weights_dict(), SOURCE, TARGET, sentence="o gato") is None
    assert len(shown) == 1 and isinstance(shown[0], IPython.display.HTML)
    assert shown[0].data.startswith('<div class="txe"') and "o gato" in shown[0].data


# ---------------------------------------------------------------------------
# In a real browser
# ---------------------------------------------------------------------------

LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking"]


def _chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip(
        "playwright.sync_api", reason="the Python package playwright is not installed "
        "(requirements-dev.txt)")
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium found (Debian: apt-get install chromium; or set CHROMIUM)")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A new page that records every request and script error, and blocks the network."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.requests, page.errors = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    context.route(re.compile(r"^(?!file:)"), lambda route: route.abort())
    yield page
    context.close()


def _open(page, tmp_path, html: str) -> str:
    path = tmp_path / "explorer.html"
    path.write_text(html, encoding="utf-8")
    page.goto(path.as_uri())
    return path.as_uri()


def _lines(page) -> list[dict]:
    return page.eval_on_selector_all(".txe-line", """lines => lines.map(l => ({
        head: +l.dataset.head, q: +l.dataset.q, k: +l.dataset.k,
        width: +l.getAttribute('stroke-width')}))""")


def test_head_view_and_model_view_render(page, tmp_path):
    url = _open(page, tmp_path, _explorer())
    assert page.locator(".txe-noscript").is_hidden()  # the script ran
    assert page.locator(".txe-cell").count() == LAYERS * HEADS
    assert page.locator(".txe-head-toggle").count() == HEADS
    assert page.locator(".txe-layer option").all_inner_texts() == ["1", "2"]
    assert page.locator(".txe-kind option").all_inner_texts() == [t for _, t, _, _ in ATTENTION_KINDS]
    queries = page.locator(".txe-token-group[data-side=q]").all_text_contents()
    keys = page.locator(".txe-token-group[data-side=k]").all_text_contents()
    assert (queries, keys) == (TARGET[1:], SOURCE)  # encoder-decoder attention first
    lines = _lines(page)  # layer 1: every head's two lines per query
    assert len(lines) == HEADS * 7 * 2
    for line in lines:
        strong = _strong_key(0, line["head"], line["q"], len(SOURCE))
        assert line["width"] == pytest.approx(0.6 + 5 * (STRONG if line["k"] == strong else WEAK))
    assert page.locator(".txe-translation").inner_text() == "the black cat eats the cake"
    assert page.errors == [] and page.requests == [url]


def test_a_model_view_click_and_a_hover_change_the_head_view(page, tmp_path):
    url = _open(page, tmp_path, _explorer())
    page.locator('.txe-cell[data-layer="1"][data-head="2"]').click()
    assert page.locator(".txe-layer").input_value() == "1"  # layer 2
    assert page.locator(".txe-cell.txe-selected").count() == 1
    assert page.locator(".txe-head-toggle.txe-off").count() == HEADS - 1
    lines = _lines(page)
    assert {line["head"] for line in lines} == {2} and len(lines) == 7 * 2
    page.locator(".txe-token-group[data-side=q]").nth(3).hover()
    assert {(line["q"], line["k"]) for line in _lines(page)} == {
        (3, _strong_key(1, 2, 3, 8)), (3, (_strong_key(1, 2, 3, 8) + 1) % 8)}
    # One head shown: the hovered query's weights are written beside their keys.
    assert sorted(page.locator(".txe-value").all_text_contents()) == ["0.25", "0.75"]
    page.locator(".txe-token-group[data-side=k]").nth(0).hover()  # a key: the lines into it
    assert {line["k"] for line in _lines(page)} == {0}
    page.mouse.move(1, 1)
    assert len(_lines(page)) == 7 * 2
    page.locator(".txe-kind").select_option(label="masked decoder self-attention")
    keys = page.locator(".txe-token-group[data-side=k]").all_text_contents()
    assert keys == TARGET[:-1] and page.locator(".txe-head-toggle.txe-off").count() == 0
    # The look-ahead mask: no line goes to a later position.
    assert all(line["k"] <= line["q"] for line in _lines(page))
    page.locator(".txe-head-toggle").nth(0).click()
    assert 0 not in {line["head"] for line in _lines(page)}
    assert page.errors == [] and page.requests == [url]


def test_two_inline_copies_run_as_jupyterlab_inserts_them(page):
    """JupyterLab sets an output's HTML on a detached node and re-creates its scripts
    (attributes and text), which run once the node is in the page."""
    page.set_content("<html><body><div id=cells></div></body></html>")
    fragments = [_explorer(full_page=False), _explorer(full_page=False)]
    page.evaluate("""fragments => fragments.forEach(html => {
        const output = document.createElement('div');
        output.innerHTML = html;  // scripts set by innerHTML do not run...
        output.querySelectorAll('script').forEach(old => {  // ...until re-created
            const script = document.createElement('script');
            for (const {name, value} of old.attributes) script.setAttribute(name, value);
            script.textContent = old.textContent;
            old.replaceWith(script);
        });
        document.getElementById('cells').appendChild(output);
    })""", fragments)
    assert page.locator(".txe[data-txe-ready]").count() == 2
    assert page.locator(".txe-cell").count() == 2 * LAYERS * HEADS
    assert len(set(page.eval_on_selector_all(".txe", "els => els.map(e => e.id)"))) == 2
    assert page.errors == [] and page.requests == []


def test_an_inline_copy_runs_as_classic_notebook_inserts_it(page):
    """Classic Notebook (jQuery) inserts the output, then evaluates each script in a
    temporary element of <head>: the explorer finds its element by its class."""
    page.set_content("<html><head></head><body></body></html>")
    page.evaluate("""html => {
        const output = document.createElement('div');
        output.innerHTML = html;
        document.body.appendChild(output);
        output.querySelectorAll('script:not([type])').forEach(old => {
            const script = document.createElement('script');
            script.text = old.textContent;
            document.head.appendChild(script).parentNode.removeChild(script);
        });
    }""", _explorer(full_page=False))
    assert page.locator(".txe[data-txe-ready]").count() == 1
    assert page.locator(".txe-cell").count() == LAYERS * HEADS
    assert page.errors == [] and page.requests == []
