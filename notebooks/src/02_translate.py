# Source of notebooks/02_translate.ipynb; rebuild with `python notebooks/build_notebooks.py`.
# ruff: noqa: E402, B018

# %% [markdown]
# # Train a translator and watch it attend
#
# This notebook trains the toy Portuguese-to-English translator of this project
# on a CPU, translates a few sentences, and looks at what its attention heads
# do. It is what `python train.py` and `python translate.py --plot` do, one step
# at a time:
#
# 1. the toy corpus and its subword tokens;
# 2. the model and its learning-rate schedule (paper §5.3);
# 3. training, and the training curves;
# 4. translating, including sentences whose word order changes;
# 5. encoder-decoder attention: where each English word looks in the Portuguese;
# 6. masked decoder self-attention and encoder self-attention;
# 7. every layer and head of all three kinds of attention, in one figure;
# 8. the same weights in an interactive explorer, to hover and click through.
#
# Everything runs offline. Training writes a run directory, `runs/notebook_toy`
# (the layout of `train.py`'s, without its export); if it is already there, the notebook loads it
# instead of training again, and notebook 01 reuses it. Every statement about a
# result is printed by the code from that result, or checked by an `assert`.

# %%
import os
import sys
from pathlib import Path

# Make `transformer` importable when the notebook runs from the repository or notebooks/.
ROOT = next((p for p in (Path.cwd(), *Path.cwd().parents) if (p / "transformer" / "__init__.py").is_file()), None)
if ROOT is not None and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import json
import logging
from collections import Counter

import keras
import numpy as np
import tensorflow as tf

from transformer import Beam, CustomSchedule, Translator
from transformer.data import generate_toy_corpus, toy_vocabulary
from transformer.plot import (
    plot_attention_head,
    plot_attention_overview,
    plot_attention_weights,
    plot_learning_rate,
    plot_training_curves,
    show_attention_explorer,
)
from transformer.run import RunConfig, train

# TRANSFORMER_NOTEBOOK_QUICK=1 is the small setting of the test suite: a few
# training steps, so the translations are poor but every cell runs.
QUICK = os.environ.get("TRANSFORMER_NOTEBOOK_QUICK", "") == "1"
RUNS = Path(os.environ.get("TRANSFORMER_NOTEBOOK_RUNS") or os.path.relpath((ROOT or Path.cwd()) / "runs"))
RUN_DIR = RUNS / ("notebook_toy_quick" if QUICK else "notebook_toy")
logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
logging.getLogger("tensorflow").setLevel(logging.ERROR)
keras.utils.set_random_seed(0)
np.set_printoptions(precision=2, suppress=True)
print(f"setting: {'quick' if QUICK else 'full'}")

# %% [markdown]
# ## 1. The toy corpus
#
# The tutorial trains on TED talks, which need a download. This project
# generates a toy corpus from a small Portuguese grammar instead, so it runs on
# any machine. It is small, but it needs what attention is for: **word order
# changes** (the adjective follows the noun in Portuguese and precedes it in
# English, and a possessor moves from the end to the front), and words that
# agree in Portuguese but not in English.

# %%
corpus = generate_toy_corpus(seed=0)
print(corpus)
for source, target in corpus.train[:8]:
    print(f"{source:<60} -> {target}")

# %% [markdown]
# ## 2. The model and its learning-rate schedule
#
# The `toy` preset is a small Transformer, the paper's architecture with fewer
# and narrower layers (its sizes are printed below); `python train.py` uses it
# for the toy corpus.
#
# > "We used the Adam optimizer with $\beta_1 = 0.9$, $\beta_2 = 0.98$ and
# > $\epsilon = 10^{-9}$. We varied the learning rate over the course of
# > training, according to the formula [below]. This corresponds to increasing
# > the learning rate linearly for the first $warmup\_steps$ training steps, and
# > decreasing it thereafter proportionally to the inverse square root of the
# > step number." (§5.3)
#
# $$lrate = d_{model}^{-0.5} \cdot \min(step\_num^{-0.5},\ step\_num \cdot warmup\_steps^{-1.5})$$
#
# The paper warms up for 4,000 of its 100,000 steps. The toy run is much
# shorter, and warms up for the number of steps printed above the figure.

# %%
if QUICK:
    config = RunConfig(output_dir=str(RUN_DIR), epochs=2, steps_per_epoch=15, warmup_steps=20,
                       eval_batch_size=256, precision="float32")
else:
    # `python train.py`'s toy settings: four passes over the corpus (4 x 313 = 1,252
    # updates of 64 pairs), warm-up 400 steps; here 1,250 updates, logged as 10
    # "epochs" of 125 updates to draw smoother training curves. Precision: float32,
    # whatever the CPU.
    config = RunConfig(output_dir=str(RUN_DIR), epochs=10, steps_per_epoch=125,
                       precision="float32")
shown = ("model", "batch_size", "epochs", "steps_per_epoch", "warmup_steps", "label_smoothing", "seed")
print(json.dumps({key: value for key, value in config.to_dict().items() if key in shown}, indent=1))

# %%
total_steps = config.epochs * (config.steps_per_epoch or -(-len(corpus.train) // config.batch_size))
print(f"warm-up: {config.warmup_steps:,} of the run's {total_steps:,} steps")
plot_learning_rate(CustomSchedule(config.model.d_model, config.warmup_steps), num_steps=total_steps)

# %% [markdown]
# ## 3. Training
#
# `transformer.run.train` runs the same stages as `python train.py`: it builds
# the tokenizers, trains with `model.fit` (Adam with the schedule above,
# cross-entropy with label smoothing $\epsilon_{ls} = 0.1$ averaged over the
# non-padding tokens, §5.3-5.4), evaluates on the test split (greedy decoding,
# exact match and BLEU) and writes the run directory, without the SavedModel
# export (`export=False`), which this notebook does not use. One thing is fixed here:
# the precision, float32 on every CPU (`precision="float32"`), while
# `RunConfig` and `python train.py` left to themselves pick `mixed_bfloat16`
# where bfloat16 trains faster (CPUs with AMX, AMD CPUs with AVX-512 BF16) and
# float32 elsewhere (`transformer.run.precision.default_precision`). A finished
# run is loaded instead; the cell prints how long its training took.

# %%
if (RUN_DIR / "model.keras").is_file():
    print(f"Loading the finished run in {RUN_DIR}")
else:
    result = train(config, resume=RUN_DIR.exists(), verbose=0, export=False)
metrics = json.loads((RUN_DIR / "metrics.json").read_text())
print(f"{metrics['final_step']:,} training steps in {metrics['train_seconds']:.0f} s on the machine that trained it")
print({key: round(value, 3) for key, value in metrics["test"].items() if isinstance(value, float)})

# %%
plot_training_curves(RUN_DIR / "metrics.csv", title="The toy translator, per epoch")

# %% [markdown]
# The training and validation losses of the figure and the test loss printed
# above measure different things. Training minimises
# the label-smoothed loss of §5.4: the target is no longer "all probability on
# the right token" but $1 - \epsilon_{ls}$ on it and $\epsilon_{ls}$ spread
# evenly over the whole vocabulary of $V$ tokens. Even a model that predicts
# exactly that distribution pays its entropy,
#
# $$H = -\left(1 - \epsilon_{ls} + \tfrac{\epsilon_{ls}}{V}\right)\log\left(1 - \epsilon_{ls} + \tfrac{\epsilon_{ls}}{V}\right) - (V - 1)\,\tfrac{\epsilon_{ls}}{V}\log\tfrac{\epsilon_{ls}}{V},$$
#
# so the curves cannot go below that floor. The test loss is the plain
# cross-entropy of the right tokens (no smoothing), whose floor is 0. The cell
# below computes the floor and compares the three losses with it.

# %%
import csv

target_vocab = json.loads((RUN_DIR / "config.json").read_text())["target_vocab_size"]
eps = config.label_smoothing
p_right = 1 - eps + eps / target_vocab
floor = -(p_right * np.log(p_right) + (target_vocab - 1) * eps / target_vocab * np.log(eps / target_vocab))
with open(RUN_DIR / "metrics.csv", newline="") as file:
    last_epoch = list(csv.DictReader(file))[-1]
print(f"label-smoothed loss of a perfect model (eps={eps}, V={target_vocab}): {floor:.3f}")
print(f"last epoch: training loss {float(last_epoch['loss']):.3f}, validation loss {float(last_epoch['val_loss']):.3f} (label-smoothed)")
print(f"test loss, plain cross-entropy: {metrics['test']['loss']:.3f}")
print(f"the last epoch's losses are {float(last_epoch['loss']) - floor:.3f} (training) and "
      f"{float(last_epoch['val_loss']) - floor:.3f} (validation) above their floor; the test loss is "
      f"{float(last_epoch['val_loss']) / metrics['test']['loss']:.1f} times smaller than the validation loss")

# %% [markdown]
# ## 4. Translating
#
# The `Translator` decodes one token at a time, each conditioned on the source
# and on the tokens emitted so far (§3), as the run was evaluated (the beam size
# of that evaluation, 1 for greedy, is printed at the end of the notebook). It
# returns the text, the tokens and every attention weight of the final output.

# %%
translator = Translator.from_run(RUN_DIR)  # outputs of at most input length + 50 tokens (§6.1)

# %% [markdown]
# The model sees subword tokens, learnt from the training sentences by
# SentencePiece (the default tokenizer; `▁` marks the start of a word). It keeps
# case, accents and punctuation, so translations read as written text. Every
# sentence is wrapped in `[START]` (id 2) and `[END]` (id 3). Each row and
# column of the attention maps below is a token, which is not always a word:
# the second cell below counts the words of the grammar that SentencePiece
# keeps in one piece, and splits a possessive. A word outside the grammar is
# spelled in smaller pieces the model never saw in that place (notebook 01's
# second exercise shows what it makes of one).

# %%
ids = translator.tokenizers.source.tokenize(tf.constant(["a menina come a maçã vermelha"]))
print(ids.to_list()[0])
print([t.decode() for t in translator.tokenizers.source.lookup(ids).to_list()[0]])
print("vocabulary sizes:", int(translator.tokenizers.source.get_vocab_size()),
      "Portuguese,", int(translator.tokenizers.target.get_vocab_size()), "English tokens")

# %%
def pieces(tokenizer, text):
    """The subword pieces of `text`, without [START] and [END]."""
    return [t.decode() for t in tokenizer.lookup(tokenizer.tokenize(tf.constant([text]))).to_list()[0][1:-1]]


tokenizers = (translator.tokenizers.source, translator.tokenizers.target)
for language, words, tokenizer in zip(("Portuguese", "English"), toy_vocabulary(), tokenizers, strict=True):
    split = {word: pieces(tokenizer, word) for word in words if len(pieces(tokenizer, word)) > 1}
    print(f"{language}: {len(words) - len(split)} of the grammar's {len(words)} words are one piece; "
          f"in several pieces: {split or 'none'}")
print("a possessive:", pieces(translator.tokenizers.target, "the girl's red car"))

# %%
sentences = {
    "o gato preto dorme": "the black cat sleeps",
    "o gato preto": "the black cat",
    "a menina come a maçã vermelha": "the girl eats the red apple",
    "os cães pretos não correm": "the black dogs do not run",
    "o gato branco gosta do livro novo": "the white cat likes the new book",
    "o homem velho compra o carro vermelho da menina": "the old man buys the girl's red car",
}
results = translator(list(sentences))
for (source, reference), result in zip(sentences.items(), results, strict=True):
    # SentencePiece detokenizes to ordinary text: it compares with the reference as is.
    mark = "ok" if result.text == reference else "  "
    print(f"{mark} {source:<48} -> {result.text:<40} (reference: {reference})")
print(f"{sum(r.text == ref for r, ref in zip(results, sentences.values(), strict=True))} of "
      f"{len(sentences)} translations are their reference")
noun_phrase = results[1].text
print(f"\n'o gato preto' -> {noun_phrase!r}: " + (
    "the noun phrase alone" if noun_phrase == "the black cat"
    else "not the noun phrase alone: the shape of the training sentences won"))

# %% [markdown]
# "o gato preto" is not a sentence of the grammar (every training sentence has
# a verb), which makes it a good test of what the model learnt. A model that
# follows its source translates the noun phrase and stops there; one that has
# learnt the shape of every sentence it was trained on adds a verb. The last
# line above says which this run did.
#
# ## 5. Encoder-decoder attention: where each English word looks
#
# > "In 'encoder-decoder attention' layers, the queries come from the previous
# > decoder layer, and the memory keys and values come from the output of the
# > encoder. This allows every position in the decoder to attend over all
# > positions in the input sequence." (§3.2.3)
#
# $$\mathrm{head}_i = \mathrm{softmax}\!\left(\frac{(X_{dec} W_i^Q)(Z_{enc} W_i^K)^\top}{\sqrt{d_k}}\right) Z_{enc} W_i^V$$
#
# Row $i$ of a head is the decoder's query at the step that **predicts** output
# token $i$; the rows are labelled with those predicted tokens, the columns with
# the Portuguese tokens. A head that aligns words shows a crossing where the
# order differs: the row of "black" should look at "preto", which comes *after*
# "gato". The next cells check which heads do.

# %%
text, tokens, weights = results[0]
in_tokens = results[0].input_tokens
out_tokens = tokens[1:]  # the predicted tokens, one per row
last = config.model.num_layers
print(f"{results[0].input_tokens} -> {tokens}")
plot_attention_weights(in_tokens, out_tokens, weights, layer_name=f"decoder_layer{last}_block2")

# %% [markdown]
# The head that puts the most weight on the word-for-word alignment
# (the → o, black → preto, cat → gato, sleeps → dorme: the four pairs scored
# below), by itself. In general a word may be
# several subword tokens (`▁` starts a word), so a head's score for a pair of
# words is the weight its rows for the English word give to the Portuguese
# word's tokens. The title names the key each of the rows "black" and "cat"
# puts the most weight on, and the last line above the figure says whether they
# are "preto" and "gato": whether this head carries the swap.

# %%
def word_positions(tokens):
    """{word: its token positions}; `▁` starts a word, [START] and [END] are skipped."""
    spans = []
    for i, token in enumerate(tokens):
        if token in ("[START]", "[END]"):
            continue
        if token.startswith("▁") or not spans:
            spans.append(["", []])
        spans[-1][0] += token.lstrip("▁")
        spans[-1][1].append(i)
    positions = {}
    for word, indices in spans:
        positions.setdefault(word, indices)
    return positions


alignment = {"the": "o", "black": "preto", "cat": "gato", "sleeps": "dorme"}
out_words, in_words = word_positions(out_tokens), word_positions(in_tokens)
cross = np.concatenate([weights[f"decoder_layer{i}_block2"] for i in range(1, last + 1)])  # (layers * heads, out, in)
score = [sum(head[np.ix_(out_words[en], in_words[pt])].sum() / len(out_words[en])
             for en, pt in alignment.items() if en in out_words and pt in in_words)
         for head in cross]
best = int(np.argmax(score))
layer, head = divmod(best, config.model.num_heads)
print(f"alignment weight per head (layers 1 to {last}, {config.model.num_heads} heads each):", np.round(score, 2))
peaks = {en: in_tokens[int(np.argmax(cross[best][out_words[en]].sum(axis=0)))].lstrip("▁")
         for en in ("black", "cat") if en in out_words}
print(f"decoder_layer{layer + 1}_block2, head {head + 1} carries the swap (black → preto, cat → gato):",
      peaks == {"black": "preto", "cat": "gato"})
plot_attention_head(in_tokens, out_tokens, cross[best], title=f"decoder_layer{layer + 1}_block2, head {head + 1}: "
                    + ", ".join(f"{en} → {pt}" for en, pt in peaks.items()))

# %% [markdown]
# A longer sentence with three swaps: two adjectives and their nouns ("homem
# velho", old man; "carro vermelho", red car), and the possessor "da menina"
# that moves to the front as "the girl's".

# %%
long = results[-1]
plot_attention_weights(long.input_tokens, long.tokens[1:], long.attention_weights,
                       layer_name=f"decoder_layer{last}_block2")

# %% [markdown]
# ## 6. Self-attention in the decoder and in the encoder
#
# > "Self-attention layers in the decoder allow each position in the decoder to
# > attend to all positions in the decoder up to and including that position. We
# > need to prevent leftward information flow in the decoder to preserve the
# > auto-regressive property." (§3.2.3)
#
# The decoder's queries, keys and values are its own input, the right-shifted
# translation (`[START]` and the tokens so far). As in section 5, each row is
# labelled with the token its position predicts; the columns are the decoder's
# input tokens. The look-ahead mask leaves the upper triangle empty, no row
# looking at a later column; the `assert` checks it for every decoder layer
# and head.

# %%
decoder_inputs = tokens[:-1]  # [START] and the tokens before the last
plot_attention_weights(decoder_inputs, out_tokens, weights, layer_name="decoder_layer1_block1")

# %%
above_diagonal = max(float(np.triu(weights[f"decoder_layer{i}_block1"], k=1).max()) for i in range(1, last + 1))
print(f"largest weight above the diagonal, all decoder layers and heads: {above_diagonal:.1e}")
assert above_diagonal < 1e-6

# %% [markdown]
# > "The encoder contains self-attention layers. In a self-attention layer all of
# > the keys, values and queries come from the same place, in this case, the
# > output of the previous layer in the encoder. Each position in the encoder can
# > attend to all positions in the previous layer of the encoder." (§3.2.3)
#
# No mask other than padding: each Portuguese token may look both ways. The
# cell after the two figures measures each encoder head: how peaked its rows
# are (the mean of each row's largest weight; 1 is one key per query), and
# where its rows peak most often: on the token itself, a neighbour, a token
# farther away, or on `[START]` or `[END]` (a common way for a head to do nearly nothing),
# with how many of the rows do, which need not be a majority. Its last line
# compares the peaks with those of the encoder-decoder heads above.

# %%
plot_attention_weights(in_tokens, in_tokens, weights, layer_name="encoder_layer1")

# %%
plot_attention_weights(in_tokens, in_tokens, weights, layer_name=f"encoder_layer{last}")

# %%
def where_rows_peak(head, tokens):
    """Where the rows of a self-attention head (queries, keys) most often put their largest weight."""
    def place(row, key):
        if tokens[key] in ("[START]", "[END]"):
            return tokens[key]
        return {0: "itself", -1: "the previous token", 1: "the next token"}.get(key - row, "a token farther away")
    (kind, count), = Counter(place(row, key) for row, key in enumerate(head.argmax(axis=-1))).most_common(1)
    return f"{kind} ({count} of {len(head)} rows)"


for i in range(1, last + 1):
    for h, head in enumerate(weights[f"encoder_layer{i}"]):  # (queries, keys)
        print(f"encoder_layer{i}, head {h + 1}: peak weight {head.max(axis=-1).mean():.2f}, "
              f"rows peak most often on {where_rows_peak(head, in_tokens)}")
mean_peak = {kind: np.mean([weights[f"{prefix}{i}{suffix}"].max(axis=-1).mean() for i in range(1, last + 1)])
             for kind, prefix, suffix in (("encoder self-attention", "encoder_layer", ""),
                                          ("encoder-decoder attention", "decoder_layer", "_block2"))}
print("mean peak weight:", ", ".join(f"{kind} {peak:.2f}" for kind, peak in mean_peak.items()))

# %% [markdown]
# ## 7. Every layer and head at once
#
# > "Multi-head attention allows the model to jointly attend to information from
# > different representation subspaces at different positions." (§3.2.2)
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$$
#
# The model has three kinds of attention (§3.2.3), each in every layer, each
# with $h$ heads. `plot_attention_overview` draws them all for one translation:
# one block per kind (encoder-decoder, encoder self-, masked decoder
# self-attention), a row per layer and a column per head, one colour scale per
# kind. Read it for patterns: heads that align source and target words, heads
# that look at a neighbour, heads that rest on `[START]` or `[END]`.

# %%
plot_attention_overview(results[0].input_tokens, results[0].tokens, results[0].attention_weights)

# %% [markdown]
# ## 8. The attention explorer
#
# The same weights, to explore by hand. In the **head view** the query tokens
# stand on the left and the key tokens on the right; a line joins a query to a
# key as thick as the weight, one colour per head. Hover a token to keep only
# its lines (click it to keep them; with one head shown, the weights are
# written beside the tokens), switch heads on and off with their coloured
# boxes, and pick the layer and the kind of attention at the top. The **model
# view** beside it has every layer (rows) and head (columns) of the chosen kind
# as a small map; click one to open it in the head view.
#
# The page is self-contained: its script and style are inline and it loads
# nothing, so it works offline, in classic Notebook and in JupyterLab. Jupyter
# runs the script only in a trusted notebook (one you executed yourself); in
# a notebook opened from elsewhere, run the cell again. `python translate.py
# --run RUN "sentence" --html FILE.html` writes the same page as a file.

# %%
show_attention_explorer(results[0].attention_weights, results[0].input_tokens, results[0].tokens,
                        sentence=list(sentences)[0], translation=results[0].text,
                        model_name=f"{RUN_DIR.name} (toy preset)")

# %% [markdown]
# ## Beam search and the test split
#
# The paper decodes with beam search (beam size 4, length penalty
# $\alpha = 0.6$, §6.1). The cell below translates the sentences of section 4
# with beam 4 and compares with the greedy translations above, then prints the
# evaluation `train` wrote on the held-out test split, with its beam size
# (1 is greedy).

# %%
beam_results = translator(list(sentences), search=Beam(4))
for source, greedy, beam in zip(sentences, results, beam_results, strict=True):
    print(f"{'same' if beam.text == greedy.text else 'DIFF'} {source:<48} -> {beam.text}  (score {beam.score:.2f})")
print(f"beam 4 and greedy agree on {sum(b.text == g.text for b, g in zip(beam_results, results, strict=True))} "
      f"of {len(sentences)} sentences")
print("test split:", {key: metrics["test"][key] for key in ("num_sentences", "beam_size", "exact_match", "bleu")})
