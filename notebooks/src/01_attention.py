# Source of notebooks/01_attention.ipynb; rebuild with `python notebooks/build_notebooks.py`.
# ruff: noqa: E402, B018

# %% [markdown]
# # Attention, step by step
#
# This notebook follows a study group's outline of *Attention Is All You Need*
# (Vaswani et al., 2017) and puts each idea next to the code of this project's
# `transformer` package:
#
# 1. attention as a soft dictionary lookup;
# 2. self-attention (query, key and value all come from the same input), one
#    query worked step by step, and positional encoding in full (§3.5);
# 3. scaled dot-product attention (paper §3.2.1, Figure 2 left): why divide by $\sqrt{d_k}$;
# 4. additive versus dot-product attention (§3.2.1);
# 5. masking: padding, look-ahead, and the Keras `attention_mask` pitfall;
# 6. multi-head attention (§3.2.2, Figure 2 right);
# 7. the three uses of attention in the model (§3.2.3, Figure 1), on a small trained model;
# 8. exercises, with answers that run.
#
# Each concept comes in the same order: the paper's sentence (section numbers
# of arXiv v5), the equation, the code (which only calls the library), then a
# figure. Every statement about a result is printed by the code from that
# result, or checked by an `assert`; a statement in the prose that depends on
# the run is followed by a line `claim NAME: holds` (or `DOES NOT HOLD`) printed
# by the cell after it, which the test suite reads in the committed notebook.
# The notebook runs offline on a CPU. Notebook 03 writes the model's layers
# by hand from the trained weights.

# %%
import os
import sys
import timeit
from collections import Counter
from pathlib import Path

# Make `transformer` importable when the notebook runs from the repository or notebooks/.
ROOT = next((p for p in (Path.cwd(), *Path.cwd().parents) if (p / "transformer" / "__init__.py").is_file()), None)
if ROOT is not None and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import keras
import numpy as np
import tensorflow as tf

from transformer import (
    MultiHeadAttention,
    Translator,
    copy_weights_to_keras,
    create_decoder_mask,
    create_look_ahead_mask,
    create_padding_mask,
    positional_encoding,
    scaled_dot_product_attention,
    to_keras_attention_mask,
)
from transformer.plot import (
    dot_product_statistics,
    plot_attention_head,
    plot_attention_weights,
    plot_dot_product_variance,
    plot_masks,
    plot_positional_encoding,
)
from transformer.plot.diagrams import (
    plot_multi_head_diagram,
    plot_scaled_dot_product_diagram,
    plot_transformer_architecture,
)
from transformer.plot.study import (
    plot_attention_costs,
    plot_linear_map,
    plot_position_similarity,
    plot_query_walkthrough,
    plot_shuffled_outputs,
    plot_sinusoids,
    plot_three_uses,
)
from transformer.run import RunConfig, train

# TRANSFORMER_NOTEBOOK_QUICK=1 is the small setting of the test suite.
QUICK = os.environ.get("TRANSFORMER_NOTEBOOK_QUICK", "") == "1"
RUNS = Path(os.environ.get("TRANSFORMER_NOTEBOOK_RUNS") or os.path.relpath((ROOT or Path.cwd()) / "runs"))
RUN_DIR = RUNS / ("notebook_toy_quick" if QUICK else "notebook_toy")
keras.utils.set_random_seed(0)
np.set_printoptions(precision=3, suppress=True)


def claim(name, holds, statement):
    """Prints whether a statement of the prose holds for this run (tests/test_notebooks.py reads it)."""
    print(f"claim {name}: {'holds' if holds else 'DOES NOT HOLD'} ({statement})")


print(f"setting: {'quick' if QUICK else 'full'}")

# %% [markdown]
# ## 1. Attention as a soft dictionary lookup
#
# > "An attention function can be described as mapping a query and a set of
# > key-value pairs to an output, where the query, keys, values, and output are
# > all vectors. The output is computed as a weighted sum of the values, where
# > the weight assigned to each value is computed by a compatibility function of
# > the query with the corresponding key." (§3.2)
#
# A Python `dict` returns the one value whose key equals the query. Attention
# compares the query with *every* key, turns the scores into weights that sum to
# 1, and returns the weighted average of the values. With the paper's
# compatibility function, the scaled dot product (§3.2.1, equation 1):
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V$$
#
# The tutorial's four keys and values (keys 3 and 4 are the same key) and its
# three queries, all at once: $Q$ is a (3, 3) matrix, the weights a (3, 4) one.
# Each query's expected weights are in the comments, and the `assert` checks them.

# %%
temp_k = tf.constant([[10, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]], dtype=tf.float32)  # (4, 3)
temp_v = tf.constant([[1, 0], [10, 0], [100, 5], [1000, 6]], dtype=tf.float32)  # (4, 2)
temp_q = tf.constant([[0, 10, 0],  # aligns with the second key: its value comes back, as from a dict
                      [0, 0, 10],  # aligns with a repeated key (3 and 4): their values are averaged
                      [10, 10, 0]], dtype=tf.float32)  # aligns equally with keys 1 and 2: averaged


def print_out(q, k, v):
    temp_out, temp_attn = scaled_dot_product_attention(q, k, v, None)
    print("Attention weights are:", temp_attn, "Output is:", temp_out, sep="\n")
    return temp_attn.numpy()


np.testing.assert_allclose(print_out(temp_q, temp_k, temp_v),
                           [[0, 1, 0, 0], [0, 0, 0.5, 0.5], [0.5, 0.5, 0, 0]], atol=1e-6)

# %% [markdown]
# Each row of the weight matrix is one query's "soft lookup": an exact match puts
# all the weight on one key (a `dict` would do the same), a tie splits it. The
# softmax is why a good match wins so completely: a key's weight is
# $e^{\text{score}}$ over the sum, so a key that scores $s$ less than the match
# gets $e^{-s}$ of its weight. The scores of the first query:

# %%
scores = (temp_q @ tf.transpose(temp_k)).numpy() / np.sqrt(3)  # (3, 4) = Q K^T / sqrt(d_k)
gap = scores[0].max() - np.sort(scores[0])[-2]
print(f"scores of q = [0, 10, 0]: {scores[0]}; a key scoring {gap:.1f} less gets e^-{gap:.1f} "
      f"= {np.exp(-gap):.0e} of the match's weight")
plot_attention_head(
    in_tokens=["key 1", "key 2", "key 3", "key 4"],
    out_tokens=["q = [0, 10, 0]", "q = [0, 0, 10]", "q = [10, 10, 0]"],
    weights=scaled_dot_product_attention(temp_q, temp_k, temp_v)[1],
    title="The tutorial's queries: soft lookups",
)

# %% [markdown]
# ## A small trained model to look at
#
# The rest of the notebook looks at real embeddings and attention heads: those
# of notebook 02's toy Portuguese-to-English translator. The next cell loads the
# run notebook 02 writes, or trains it here with the same settings, and splits
# a sentence into the model's tokens. The tokenizer is SentencePiece, whose
# pieces mark the start of a word with `▁`: "▁gato" is the word "gato", a
# piece without `▁` continues the word before it. `[START]` and `[END]` wrap
# every sentence.

# %%
if not (RUN_DIR / "model.keras").is_file():
    # The settings of notebook 02: `python train.py`'s toy run (four passes over the
    # corpus, 1,250 updates), in float32; QUICK trains 30 steps only.
    steps = (dict(epochs=2, steps_per_epoch=15, warmup_steps=20, eval_batch_size=256) if QUICK
             else dict(epochs=10, steps_per_epoch=125))
    train(RunConfig(output_dir=str(RUN_DIR), precision="float32", **steps),
          resume=RUN_DIR.exists(), verbose=0, export=False)
translator = Translator.from_run(RUN_DIR)
model = translator.transformer  # a transformer.Transformer
print(f"{RUN_DIR.name}: {model.config.num_layers} layers, d_model={model.config.d_model}, "
      f"{model.config.num_heads} heads, {model.count_params():,} parameters")


def tokenize(sentence, tokenizer):
    """Token ids (1, seq_len) and their strings, [START] ... [END]."""
    ids = tokenizer.tokenize(tf.constant([sentence])).to_tensor()  # (1, seq_len)
    return ids, [token.decode() for token in tokenizer.lookup(ids)[0].numpy()]


source_ids, source_tokens = tokenize("o gato preto come o bolo", translator.tokenizers.source)
print(source_tokens, source_ids.numpy())

# %% [markdown]
# ## 2. Self-attention: query = key = value = the input
#
# > "Self-attention, sometimes called intra-attention is an attention mechanism
# > relating different positions of a single sequence in order to compute a
# > representation of the sequence." (§2)
#
# Take one sentence, embed it, and use the same matrix $X$ (one row per token)
# as queries, keys and values:
#
# $$\mathrm{SelfAttention}(X) = \mathrm{softmax}\!\left(\frac{XX^\top}{\sqrt{d_{model}}}\right)X$$
#
# The input embedding is the trained model's: the token embedding scaled by
# $\sqrt{d_{model}}$ plus the sinusoidal positional encoding (§3.4, §3.5).

# %%
x = model.encoder.pos_embedding(source_ids)  # (1, seq_len, d_model)
output, self_weights = scaled_dot_product_attention(x, x, x)  # Q = K = V = x
print("x:", x.shape, " weights:", self_weights.shape, " output:", output.shape)
on_itself = int((self_weights[0].numpy().argmax(axis=-1) == np.arange(len(source_tokens))).sum())
print(f"{on_itself} of the {len(source_tokens)} tokens put their largest weight on themselves")
plot_attention_head(source_tokens, source_tokens, self_weights[0],
                    title="softmax(X X^T / sqrt(d_model)): the trained input embedding")

# %% [markdown]
# Without learned projections a token's score with itself, $\|x_i\|^2 / \sqrt{d_{model}}$,
# competes with its scores with the others; the line above counts the tokens
# for which it wins. To look for something else, a token needs the *different*
# learned projections $W^Q$, $W^K$, $W^V$ of the model's layers (section 6).
#
# ### One query, step by step
#
# The output for one token is a weighted sum of the value rows. For the query
# of "preto": its dot product with every key, the same divided by
# $\sqrt{d_k}$ (here $d_k = d_{model}$), the softmax of those, each value row
# times its weight, and their sum, which is the row of "preto" in the output
# above (the cell checks it):
#
# $$\text{output}_i = \sum_j \mathrm{softmax}_j\!\left(\frac{q_i \cdot k_j}{\sqrt{d_k}}\right) v_j$$

# %%
i = source_tokens.index("▁preto") if "▁preto" in source_tokens else 1
x_rows = x[0].numpy()  # (seq_len, d_model): queries, keys and values alike
dot_products = x_rows @ x_rows[i]  # (seq_len,) = q_i . k_j
weights_i = tf.nn.softmax(dot_products / np.sqrt(model.config.d_model)).numpy()
np.testing.assert_allclose(weights_i @ x_rows, output[0, i].numpy(), atol=1e-4)
print(f"query {source_tokens[i]!r}: weights {weights_i.round(3)}; their weighted sum of the values is "
      "row", i, "of the output")
plot_query_walkthrough(source_tokens, dot_products, model.config.d_model, x_rows,
                       query_label=f"the query of {source_tokens[i]!r} (the trained input embedding)")

# %% [markdown]
# ### Positional encoding (§3.5)
#
# > "Since our model contains no recurrence and no convolution, in order for
# > the model to make use of the order of the sequence, we must inject some
# > information about the relative or absolute position of the tokens in the
# > sequence." (§3.5)
#
# Self-attention by itself has no notion of order: permuting the tokens only
# permutes the output. What tells the two "o"s of the sentence apart is the
# positional encoding added to the embedding,
#
# $$PE_{(pos, 2i)} = \sin(pos / 10000^{2i/d_{model}}), \qquad
# PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/d_{model}})$$
#
# With it, the rows of the two "o"s differ; with the token embedding alone
# they are the same row. <!-- claim: two-o -->

# %%
first_o, second_o = [i for i, token in enumerate(source_tokens) if token == "▁o"]  # `▁` starts a word
no_position = model.encoder.pos_embedding.embedding(source_ids) * np.sqrt(model.config.d_model)  # (1, seq_len, d_model)
_, no_position_weights = scaled_dot_product_attention(no_position, no_position, no_position)
for name, w in (("with the positional encoding", self_weights), ("token embedding only", no_position_weights)):
    rows = w[0].numpy()
    print(f"{name:>30}: rows of the two 'o's differ by {np.abs(rows[first_o] - rows[second_o]).max():.3f}")
gap = {name: np.abs(w[0].numpy()[first_o] - w[0].numpy()[second_o]).max()
       for name, w in (("with", self_weights), ("without", no_position_weights))}
claim("two-o", gap["with"] > 1e-3 and gap["without"] < 1e-6,
      "the two 'o' rows differ with the positional encoding and are equal without it")
plot_positional_encoding(model.encoder.pos_embedding.pos_encoding)  # (max_length, d_model)

# %% [markdown]
# Each pair of columns $(2i, 2i+1)$ is a sine and a cosine of the same
# frequency, $1/10000^{2i/d_{model}}$: "the wavelengths form a geometric
# progression from $2\pi$ to $10000 \cdot 2\pi$" (§3.5). The heatmap above
# drawn column by column, for a few columns of this model's $d_{model}$:

# %%
pe = positional_encoding(model.config.max_length, model.config.d_model)  # (max_length, d_model)
d = model.config.d_model
plot_sinusoids(pe, [0, 1, 8, 9, d // 2, d - 2, d - 1])

# %% [markdown]
# How alike are two positions? The dot product $PE_p \cdot PE_q$ is a sum of
# $\sin\sin + \cos\cos = \cos(\omega_i (p - q))$ terms, so it depends only on
# the distance $p - q$ and is largest at distance 0; the figure's right panel
# draws it from several starting positions. <!-- claim: offset-only -->

# %%
similarity = pe @ pe.T  # (max_length, max_length)
half = len(pe) // 2
offsets_from = np.array([[similarity[p, p + k] for k in range(half)] for p in range(half)])  # (start, offset)
spread = np.abs(offsets_from - offsets_from[0]).max()
print(f"PE(p).PE(p+k) over starts p < {half} and offsets k < {half}: differs from the p = 0 curve by at most "
      f"{spread:.1e}; largest off the diagonal: {(similarity - np.diag(np.diag(similarity))).max():.2f}, "
      f"on it: {similarity[0, 0]:.2f}")
claim("offset-only", spread < 1e-3 and (similarity - 1e9 * np.eye(len(pe))).max() < similarity[0, 0],
      "PE(p).PE(p+k) depends on k only, and a position is most like itself")
plot_position_similarity(pe)

# %% [markdown]
# The paper's reason for sinusoids: "we hypothesized it would allow the model
# to easily learn to attend by relative positions, since for any fixed offset
# $k$, $PE_{pos+k}$ can be represented as a linear function of $PE_{pos}$"
# (§3.5). The linear function is a rotation of each (sine, cosine) pair by the
# angle $\omega_i k$:
#
# $$\begin{pmatrix}\sin \omega_i(p+k) \\ \cos \omega_i(p+k)\end{pmatrix} =
# \begin{pmatrix}\cos \omega_i k & \sin \omega_i k \\ -\sin \omega_i k & \cos \omega_i k\end{pmatrix}
# \begin{pmatrix}\sin \omega_i p \\ \cos \omega_i p\end{pmatrix}$$
#
# One matrix $M_k$, the same for every position. The cell builds it for
# $k = 3$, checks that $M_k PE_p = PE_{p+k}$ at every position, and also finds
# a matrix from the encodings alone by least squares, which predicts as well.
# <!-- claim: linear-map -->

# %%
k_offset = 3
omega = 1 / 10000 ** (np.arange(0, d, 2) / d)  # (d/2,) one frequency per pair of columns
M = np.zeros((d, d))
for pair, w in enumerate(omega):
    c, s_ = np.cos(w * k_offset), np.sin(w * k_offset)
    M[2 * pair:2 * pair + 2, 2 * pair:2 * pair + 2] = [[c, s_], [-s_, c]]
predicted = pe[:-k_offset] @ M.T  # row p: M @ PE_p
fitted, *_ = np.linalg.lstsq(pe[:-k_offset].astype(np.float64), pe[k_offset:].astype(np.float64), rcond=None)
errors = {"the rotation matrix": np.abs(predicted - pe[k_offset:]).max(),
          "least squares": np.abs(pe[:-k_offset] @ fitted - pe[k_offset:]).max()}
for name, error in errors.items():
    print(f"{name:>20}: max |M PE(p) - PE(p + {k_offset})| over {len(pe) - k_offset} positions = {error:.1e}")
claim("linear-map", max(errors.values()) < 1e-4, f"one matrix maps PE(p) to PE(p+{k_offset}) at every position")
plot_linear_map(M, f"M for k = {k_offset}: 2 x 2 rotations on the diagonal (first 16 columns)")

# %% [markdown]
# Without positions, order is invisible beyond the two "o"s: shuffle the words
# of the sentence, "o gato preto come o bolo" becoming "o bolo preto come o
# gato" (a black cake eating the cat), and run the trained encoder's layers on
# the token embeddings without the positional encoding. Each output row is
# the same as before, only in the shuffled order; with the positional encoding
# the rows change. <!-- claim: shuffle-blind -->

# %%
inner = list(range(1, len(source_tokens) - 1))  # keep [START] and [END] in place
words = [source_tokens[j] for j in inner]
order = ([0, *[inner[words.index(w)] for w in ("▁o", "▁bolo", "▁preto", "▁come")], inner[4], inner[1],
          len(source_tokens) - 1] if words == ["▁o", "▁gato", "▁preto", "▁come", "▁o", "▁bolo"]
         else [0, *inner[::-1], len(source_tokens) - 1])  # another sentence: reversed
shuffled_ids = tf.gather(source_ids, order, axis=1)  # (1, seq_len)


def encoder_layers(x):
    """The trained encoder's layers on an embedded input (no dropout)."""
    for layer in model.encoder.enc_layers:
        x, _ = layer(x, training=False)
    return x[0].numpy()  # (seq_len, d_model)


embed = model.encoder.pos_embedding
results = {}
for name, make in (("without positions", lambda ids: embed.embedding(ids) * np.sqrt(d)),
                   ("with positions", embed)):
    original, shuffled = encoder_layers(make(source_ids)), encoder_layers(make(shuffled_ids))
    results[name] = (original, shuffled, np.abs(shuffled - original[order]).max())
    print(f"{name:>18}: max |output(shuffled) - shuffled(output)| = {results[name][2]:.1e}")
print("shuffled sentence:", " ".join(source_tokens[j] for j in order))
claim("shuffle-blind", results["without positions"][2] < 1e-4 < results["with positions"][2],
      "without positions the encoder's outputs are only shuffled; with them they change")
plot_shuffled_outputs(source_tokens, results["without positions"][0], order, results["without positions"][1],
                      title="The trained encoder without positional encoding: shuffled words, shuffled outputs")

# %% [markdown]
# ## 3. Scaled dot-product attention: why divide by $\sqrt{d_k}$ (§3.2.1)
#
# The paper defines it in two sentences:
#
# > "The input consists of queries and keys of dimension $d_k$, and values of
# > dimension $d_v$. We compute the dot products of the query with all keys,
# > divide each by $\sqrt{d_k}$, and apply a softmax function to obtain the
# > weights on the values." (§3.2.1)
#
# The paper's Figure 2 (left) draws it as a pipeline; here with the shapes of
# one head of the trained model's encoder self-attention on the sentence above:

# %%
plot_scaled_dot_product_diagram(len(source_tokens), len(source_tokens), model.config.d_model // model.config.num_heads)

# %% [markdown]
# That is all of it. In NumPy, with this project's mask convention (1 = may not
# attend), it is five lines; below it is checked against the library's
# `scaled_dot_product_attention` on random inputs shaped like one layer's heads.

# %%
def attention_numpy(q, k, v, mask=None):
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(k.shape[-1])  # (..., seq_q, seq_k)
    if mask is not None:
        logits = logits + mask * -1e9  # a masked key gets a weight of (almost exactly) 0
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))  # softmax over the keys...
    weights = weights / weights.sum(axis=-1, keepdims=True)  # ...each row sums to 1
    return weights @ v, weights  # (..., seq_q, d_v), (..., seq_q, seq_k)


rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((2, 4, 6, 8)).astype(np.float32) for _ in range(3))  # (batch, heads, seq, depth)
mask = create_look_ahead_mask(6).numpy()  # (6, 6)
differences = [np.abs(a - b.numpy()).max() for a, b in zip(attention_numpy(q, k, v, mask),
                                                            scaled_dot_product_attention(q, k, v, mask), strict=True)]
print(f"max |NumPy - library|: outputs {differences[0]:.1e}, weights {differences[1]:.1e}")
assert max(differences) < 1e-5

# %% [markdown]
# Why the division by $\sqrt{d_k}$?
#
# > "We suspect that for large values of $d_k$, the dot products grow large in
# > magnitude, pushing the softmax function into regions where it has extremely
# > small gradients. To counteract this effect, we scale the dot products by
# > $\frac{1}{\sqrt{d_k}}$." (§3.2.1)
#
# and footnote 4: "assume that the components of $q$ and $k$ are independent
# random variables with mean 0 and variance 1. Then their dot product,
# $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$, has mean 0 and variance $d_k$."
#
# $$\operatorname{Var}(q\cdot k) = \sum_{i=1}^{d_k}\operatorname{Var}(q_i k_i) = d_k,
# \qquad \operatorname{Var}\!\left(\frac{q\cdot k}{\sqrt{d_k}}\right) = 1$$
#
# Measured on random vectors (2,000 queries, each against 16 keys, per $d_k$):
# unscaled, the largest of a row's weights grows with $d_k$ towards 1; scaled,
# it stays put. <!-- claim: saturation -->

# %%
stats = dot_product_statistics((1, 4, 16, 64, 256, 512))
print(f"{'d_k':>5} {'var(q.k)':>10} {'var(q.k/sqrt(d_k))':>19} {'max weight':>11} {'max weight scaled':>18}")
for row in zip(*(stats[key] for key in ("d_k", "variance_unscaled", "variance_scaled",
                                         "max_weight_unscaled", "max_weight_scaled")), strict=True):
    print("{:5.0f} {:10.1f} {:19.2f} {:11.2f} {:18.2f}".format(*row))
ratio = stats["variance_unscaled"] / stats["d_k"]
print(f"var(q.k) / d_k is {ratio.min():.2f} to {ratio.max():.2f}; var(q.k / sqrt(d_k)) is "
      f"{stats['variance_scaled'].min():.2f} to {stats['variance_scaled'].max():.2f}. At d_k = 512 the "
      f"largest of 16 weights averages {stats['max_weight_unscaled'][-1]:.2f} unscaled, "
      f"{stats['max_weight_scaled'][-1]:.2f} scaled.")
claim("saturation", stats["max_weight_unscaled"][-1] > 0.9 and np.all(np.diff(stats["max_weight_unscaled"]) > 0),
      "unscaled, the largest weight of a row grows with d_k towards 1")

# %% [markdown]
# Unscaled logits have a standard deviation of $\sqrt{d_k}$ ($\approx 23$ at
# $d_k = 512$), and the largest weight of a row climbs towards 1. The softmax's
# gradient is the Jacobian $\partial p_i / \partial z_j = p_i(\delta_{ij} - p_j)$,
# which vanishes as $p$ approaches one-hot. Its average size (Frobenius norm) at
# three depths:

# %%
rng = np.random.default_rng(0)
for d_k in (4, 64, 512):
    logits = np.einsum("nd,nkd->nk", rng.standard_normal((2000, d_k)), rng.standard_normal((2000, 16, d_k)))
    norms = {}
    for name, z in (("unscaled", logits), ("scaled", logits / np.sqrt(d_k))):  # (samples, keys)
        p = tf.nn.softmax(z).numpy()
        jacobian = p[:, :, None] * np.eye(16) - p[:, :, None] * p[:, None, :]  # (samples, keys, keys)
        norms[name] = np.linalg.norm(jacobian, axis=(1, 2)).mean()
    print(f"d_k={d_k:3d}: mean |d softmax / d logits| = {norms['unscaled']:.3f} unscaled, "
          f"{norms['scaled']:.3f} scaled")

# %%
plot_dot_product_variance()

# %% [markdown]
# ## 4. Additive versus dot-product attention (§3.2.1)
#
# > "The two most commonly used attention functions are additive attention, and
# > dot-product (multiplicative) attention. [...] While the two are similar in
# > theoretical complexity, dot-product attention is much faster and more
# > space-efficient in practice, since it can be implemented using highly
# > optimized matrix multiplication code." (§3.2.1)
#
# Additive attention (Bahdanau et al., 2015) scores a pair with a one-hidden-layer
# network, dot-product attention with a dot product:
#
# $$\text{additive: } e_{ij} = v^\top \tanh(W_q q_i + W_k k_j) \qquad
# \text{dot-product: } e_{ij} = \frac{q_i \cdot k_j}{\sqrt{d_k}}$$
#
# For $n$ queries, $m$ keys and hidden width $d_a = d_k$, both cost
# $O(n\,m\,d_k)$ multiply-adds, but additive attention builds an
# $n \times m \times d_a$ tensor of `tanh` inputs, dot-product attention one
# matrix product with an $n \times m$ result. Both timed on this CPU, first at
# one size, then over $d_k$ in the figure below; dot-product attention is the
# faster at every $d_k$ measured. <!-- claim: dot-faster -->

# %%
n = m = 256
d_k = d_a = 64
rng = np.random.default_rng(0)
q, k = (tf.constant(rng.standard_normal((size, d_k)), tf.float32) for size in (n, m))  # (n, d_k), (m, d_k)
w_q, w_k = (tf.constant(rng.standard_normal((d_k, d_a)) / 8, tf.float32) for _ in range(2))  # (d_k, d_a)
v_a = tf.constant(rng.standard_normal((d_a,)), tf.float32)  # (d_a,)


def dot_product_scores():
    return tf.matmul(q, k, transpose_b=True) / np.sqrt(d_k)  # (n, m)


def additive_scores():
    hidden = tf.tanh((q @ w_q)[:, None, :] + (k @ w_k)[None, :, :])  # (n, m, d_a)
    return tf.reduce_sum(hidden * v_a, axis=-1)  # (n, m)


print(f"multiply-adds  dot-product: {n * m * d_k:>10,}   additive: {(n + m) * d_k * d_a + n * m * d_a:>10,} (+ {n * m * d_a:,} tanh)")
print(f"largest tensor dot-product: {n * m:>10,}   additive: {n * m * d_a:>10,} floats")
seconds = [min(timeit.repeat(f, number=10, repeat=5)) / 10 for f in (dot_product_scores, additive_scores)]
print(f"time per call      dot-product: {seconds[0] * 1e3:7.3f} ms   additive: {seconds[1] * 1e3:7.3f} ms "
      f"({seconds[1] / seconds[0]:.0f}x)")

# %% [markdown]
# The paper adds: "While for small values of $d_k$ the two mechanisms perform
# similarly, additive attention outperforms dot product attention without
# scaling for larger values of $d_k$" (§3.2.1). Additive scores pass through
# `tanh`, bounded by 1 before the final $v^\top$; with the usual
# initialisation ($v$ and $W$ of variance one over their input width) they do
# not grow with $d_k$, and neither does the softmax's peak, while unscaled dot
# products saturate it. The figure measures both effects: time per call over
# $d_k$ (left, 128 queries and 128 keys), and the mean largest weight of 16
# keys (right, random unit-variance queries and keys).

# %%
d_ks = (16, 64, 256)
costs = {"dot-product": [], "additive": []}
peaks = {"additive": []}
for d_k in d_ks:
    rng = np.random.default_rng(d_k)
    q, k = (tf.constant(rng.standard_normal((128, d_k)), tf.float32) for _ in range(2))  # (128, d_k)
    w_q, w_k = (tf.constant(rng.standard_normal((d_k, d_k)) / np.sqrt(d_k), tf.float32) for _ in range(2))
    v_a = tf.constant(rng.standard_normal((d_k,)) / np.sqrt(d_k), tf.float32)  # (d_a,)
    d_a = d_k
    for name, f in (("dot-product", dot_product_scores), ("additive", additive_scores)):
        costs[name].append(min(timeit.repeat(f, number=5, repeat=3)) / 5)
    # Peaks: 500 queries against 16 keys each.
    qs, ks = rng.standard_normal((500, d_k)), rng.standard_normal((500, 16, d_k))
    hidden = np.tanh((qs @ w_q.numpy())[:, None, :] + ks @ w_k.numpy())  # (500, 16, d_a)
    peaks["additive"].append(tf.nn.softmax(hidden @ v_a.numpy()).numpy().max(-1).mean())
peak_stats = dot_product_statistics(d_ks)
peaks = {"dot-product, unscaled": peak_stats["max_weight_unscaled"],
         "dot-product, scaled": peak_stats["max_weight_scaled"], **peaks}
for j, d_k in enumerate(d_ks):
    print(f"d_k={d_k:3d}: dot-product {costs['dot-product'][j] * 1e3:.3f} ms, additive {costs['additive'][j] * 1e3:.3f} ms; "
          "largest weight " + ", ".join(f"{name} {values[j]:.2f}" for name, values in peaks.items()))
claim("dot-faster", all(a > b for a, b in zip(costs["additive"], costs["dot-product"], strict=True)),
      "dot-product scores are faster than additive ones at every d_k measured")
plot_attention_costs(d_ks, costs, peaks)

# %% [markdown]
# ## 5. Masking
#
# > "We need to prevent leftward information flow in the decoder to preserve the
# > auto-regressive property. We implement this inside of scaled dot-product
# > attention by masking out (setting to $-\infty$) all values in the input of
# > the softmax which correspond to illegal connections." (§3.2.3)
#
# This project has **one mask convention: 1 means "may NOT attend"** (a padding
# key or a future position). `scaled_dot_product_attention` adds
# $-10^9$ times the mask to the logits before the softmax:
#
# $$\mathrm{Attention}(Q, K, V, M) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} - 10^9 M\right)V$$
#
# The padding mask hides the `[PAD]` tokens (id 0) of a batch; it has shape
# `(batch, 1, 1, seq_len)` so it broadcasts over heads and queries. The
# look-ahead mask hides the future: row $i$ (a query) may not see column
# $j > i$ (a key), the strict upper triangle. The decoder's self-attention
# combines both: a key is hidden if it is padding *or* in the future. The three
# for a target sentence with two padding tokens (rows are queries, columns
# keys, dark = masked):

# %%
target_ids, target_tokens = tokenize("the black cat", translator.tokenizers.target)  # (1, 5)
target_ids = tf.pad(target_ids, [[0, 0], [0, 2]])  # two [PAD]s (id 0) after [END]: (1, 7)
target_tokens += ["[PAD]", "[PAD]"]
print(target_tokens, target_ids.numpy())
plot_masks(
    padding_mask=create_padding_mask(target_ids),  # (1, 1, 1, 7)
    look_ahead_mask=create_look_ahead_mask(7),  # (7, 7)
    combined_mask=create_decoder_mask(target_ids),  # (1, 1, 7, 7)
    tokens=target_tokens,
)

# %% [markdown]
# ### The pitfall: `keras.layers.MultiHeadAttention` uses the opposite convention
#
# Keras's `attention_mask` holds 1 (True) where attention **is** allowed. Passing
# it one of our masks unconverted raises no error; the fix is `1 - mask`
# (`to_keras_attention_mask`). Below, our `MultiHeadAttention` and Keras's with
# the same weights (`copy_weights_to_keras`), on 5 random positions with the
# look-ahead mask: row $i$ should put nothing on columns $j > i$. The `assert`s
# check what the printed lines say.

# %%
keras.utils.set_random_seed(1)
ours, theirs = MultiHeadAttention(d_model=16, num_heads=2), keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
x = tf.random.normal((1, 5, 16))  # (batch, seq_len, d_model)
ours(x, x, x)  # builds the layer
copy_weights_to_keras(ours, theirs)
look_ahead = create_look_ahead_mask(5)  # (5, 5), 1 = not allowed
out_ours, w_ours = ours(x, x, x, mask=look_ahead)  # (1, 5, 16), (1, 2, 5, 5)
out_keras, w_right = theirs(x, x, attention_mask=to_keras_attention_mask(look_ahead)[tf.newaxis],
                            return_attention_scores=True)
_, w_wrong = theirs(x, x, attention_mask=look_ahead[tf.newaxis], return_attention_scores=True)  # NOT converted

future = look_ahead.numpy().astype(bool)  # where the weights must be 0
on_future = {name: (w[0].numpy() * future).sum(axis=-1)  # (heads, rows)
             for name, w in (("ours, mask", w_ours), ("Keras, 1 - mask", w_right), ("Keras, mask unconverted", w_wrong))}
for name, weight in on_future.items():
    print(f"{name:>24}: weight on future positions per row, head 1 = {weight[0]}")
agreement = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in ((out_ours, out_keras), (w_ours, w_right)))
print(f"ours against Keras with 1 - mask, same weights: outputs and weights differ by at most {agreement:.1e}")
assert on_future["ours, mask"].max() < 1e-6 and on_future["Keras, 1 - mask"].max() < 1e-6 and agreement < 1e-5
assert np.allclose(on_future["Keras, mask unconverted"][:, :-1], 1, atol=1e-6)  # all weight on the future
assert np.abs(w_wrong[0, :, -1].numpy()).max() < 1e-6  # and the last row, with no future, gets none
print("unconverted: every row but the last puts all its weight on the future, in every head; "
      "the last row has no weight at all")

# %% [markdown]
# A model trained with the unconverted mask reads the very token it has to
# predict: training rewards copying it, and when the model generates one token
# at a time there is nothing to copy. The same head three ways (the inputs are
# random vectors, so the rows and columns are positions, not words):

# %%
positions = [f"position {i}" for i in range(1, 6)]
fig = plot_attention_weights(positions, positions, np.stack([w_ours[0, 0], w_right[0, 0], w_wrong[0, 0]]))
for ax, title in zip(fig.axes[:3], ["ours, mask", "Keras, 1 - mask", "Keras, mask (WRONG)"], strict=True):
    ax.set_title(title)
fig.suptitle("Head 1 of the same layer under three masks: the inverted convention attends only to the future")
fig

# %% [markdown]
# ## 6. Multi-head attention (§3.2.2)
#
# > "Instead of performing a single attention function with
# > $d_{\text{model}}$-dimensional keys, values and queries, we found it
# > beneficial to linearly project the queries, keys and values $h$ times with
# > different, learned linear projections to $d_k$, $d_k$ and $d_v$ dimensions,
# > respectively. [...] Due to the reduced dimension of each head, the total
# > computational cost is similar to that of single-head attention with full
# > dimensionality." (§3.2.2)
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)W^O,
# \quad \mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V)$$
#
# `MultiHeadAttention` stores all $h$ projections $W_i^Q$ side by side in one
# `Dense(d_model)` layer `wq` (likewise `wk`, `wv`), and `split_heads` cuts its
# output into $h$ heads of depth $d_k = d_{model}/h$. The shapes, with the
# tutorial's `d_model=512`, `num_heads=8` and a sequence of 60 tokens:

# %%
mha = MultiHeadAttention(d_model=512, num_heads=8)
y = tf.random.uniform((1, 60, 512))  # (batch, seq_len, d_model)
out, attn = mha(y, y, y)
q_heads = mha.split_heads(mha.wq(y), batch_size=1)
k_heads, v_heads = mha.project_keys_values(y, y)
heads_out, heads_w = scaled_dot_product_attention(q_heads, k_heads, v_heads)
concat = mha.combine_heads(heads_out, batch_size=1)
for name, tensor in (("input y", y), ("wq(y)", mha.wq(y)),
                     ("split_heads(wq(y)): (batch, heads, seq_len, depth)", q_heads),
                     ("attention weights: (batch, heads, seq_q, seq_k)", heads_w),
                     ("attention output per head", heads_out), ("combine_heads (Concat)", concat),
                     ("dense (W^O): the layer output", mha.dense(concat)), ("mha(y, y, y)", out)):
    print(f"{name:<52} {tuple(tensor.shape)}")
np.testing.assert_allclose(mha.dense(concat), out, atol=1e-5)  # the steps are the layer
plot_multi_head_diagram(512, 8, 60)

# %% [markdown]
# The parameters are the four `d_model x d_model` projections whatever $h$ is,
# and the multiply-adds, counted from the shapes above, do not depend on $h$
# either: each head does $1/h$ of a full-width head's work (the `assert`).

# %%
seq_len = 60
print(f"{'heads':>5} {'depth':>5} {'parameters':>11} {'projection MACs':>16} {'attention MACs':>15} {'total MACs':>12}")
costs = set()
for num_heads in (1, 2, 4, 8, 16):
    layer = MultiHeadAttention(d_model=512, num_heads=num_heads)
    layer(y, y, y)
    _, h, n_q, depth = layer.split_heads(layer.wq(y), batch_size=1).shape  # (1, h, seq_len, depth)
    projection = 4 * n_q * 512 * 512  # wq, wk, wv, dense: (seq_len, 512) x (512, 512) each
    attention = h * 2 * n_q * seq_len * depth  # Q K^T and weights x V, per head
    print(f"{h:5d} {depth:5d} {layer.count_params():11,} {projection:16,} {attention:15,} {projection + attention:12,}")
    costs.add((layer.count_params(), projection + attention))
assert len(costs) == 1, costs

# %% [markdown]
# ### A pitfall of the tutorial's Keras version: `key_dim = d_model`
#
# The paper's heads are narrow: "we employ $h = 8$ parallel attention layers,
# or heads. For each of these we use $d_k = d_v = d_{model}/h = 64$" (§3.2.2).
# The later, Keras-based version of the TensorFlow tutorial builds its layers as
# `keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=d_model)`, and
# Keras's `key_dim` is the size of *each* head. Every head is then $d_{model}$
# wide; `key_dim = d_model // num_heads` is the paper's layer:

# %%
params = {"this project's MultiHeadAttention": mha.count_params()}
for name, key_dim in (("Keras, key_dim = d_model // num_heads", 64), ("Keras, key_dim = d_model (tutorial)", 512)):
    layer = keras.layers.MultiHeadAttention(num_heads=8, key_dim=key_dim)
    layer(y, y)
    params[name] = layer.count_params()
    print(f"{name:>38}: {params[name]:>10,} parameters ({params[name] / mha.count_params():.2f} times ours)")

# %% [markdown]
# > "Multi-head attention allows the model to jointly attend to information from
# > different representation subspaces at different positions. With a single
# > attention head, averaging inhibits this." (§3.2.2)
#
# Each head has its own projections, so it *can* have its own attention
# pattern. Whether the trained heads do is a question for the data: the next
# section draws every head of the trained model side by side and measures how
# different they are.
#
# ## 7. The three uses of attention in the model (§3.2.3)
#
# > "The Transformer uses multi-head attention in three different ways" (§3.2.3)
#
# Figure 1 of the paper, drawn with this model's sizes, places them: the
# encoder's self-attention (yellow), the decoder's masked self-attention
# (red) and the encoder-decoder attention between them (orange).

# %%
c = model.config
plot_transformer_architecture(c.num_layers, c.d_model, c.num_heads, c.dff,
                              int(translator.tokenizers.source.get_vocab_size()),
                              int(translator.tokenizers.target.get_vocab_size()),
                              num_decoder_layers=c.decoder_layers)

# %% [markdown]
#
# The subsections follow the paper's order: encoder-decoder attention, encoder
# self-attention, masked decoder self-attention. To see each with its real
# inputs, run the model once with teacher forcing, as in training: the encoder
# gets the Portuguese tokens, the decoder the English reference shifted right
# (`[START]` first, no final `[END]`), and the model returns every layer's
# attention weights. In every figure of a decoder attention below, the
# rows (queries) are labelled with the token the decoder position predicts;
# the columns of the decoder's self-attention are its input tokens.

# %%
target_ids, target_tokens = tokenize("the black cat eats the cake", translator.tokenizers.target)
decoder_input_ids, decoder_input_tokens = target_ids[:, :-1], target_tokens[:-1]  # right-shifted
labels = target_tokens[1:]  # what each decoder position must predict
logits, weights = model((source_ids, decoder_input_ids), return_attention_weights=True)
predicted = [token.decode() for token in translator.tokenizers.target.lookup(tf.argmax(logits, -1))[0].numpy()]
print("decoder input:", decoder_input_tokens)
print("labels:       ", labels)
print("predictions:  ", predicted, f"({sum(map(str.__eq__, predicted, labels))} of {len(labels)} right)")
for name, w in weights.items():
    print(f"{name:>22}: {tuple(w.shape)}  (batch, heads, queries, keys)")

# %% [markdown]
# ### Encoder-decoder attention
#
# > "In 'encoder-decoder attention' layers, the queries come from the previous
# > decoder layer, and the memory keys and values come from the output of the
# > encoder. This allows every position in the decoder to attend over all
# > positions in the input sequence." (§3.2.3)
#
# $$Q = \text{decoder states}, \qquad K = V = \text{encoder output}, \qquad
# M = \text{padding mask of the source}$$
#
# The rows are labelled with the token each decoder position predicts. Where
# the word order differs an aligning head crosses: the row that predicts
# "black" would look at "preto", which comes after "gato". The lines above the
# figure say whether every word of the two sentences is one token, and where
# each head's row of "black" puts its largest weight.

# %%
last_cross = f"decoder_layer{model.config.decoder_layers}_block2"
for name, tokens in (("Portuguese", source_tokens), ("English", target_tokens)):
    print(f"{name}: {len(tokens) - 2} tokens between [START] and [END] for "
          f"{sum(t.startswith('▁') for t in tokens)} words")
fig = plot_attention_weights(source_tokens, labels, weights, layer_name=last_cross)
if "▁black" in labels:
    row = weights[last_cross][0, :, labels.index("▁black")].numpy()  # (heads, source_len)
    print("the row of 'black' peaks on:", ", ".join(
        f"head {h + 1}: {source_tokens[int(r.argmax())]} ({r.max():.2f})" for h, r in enumerate(row)))
fig

# %% [markdown]
# ### Encoder self-attention
#
# > "The encoder contains self-attention layers. In a self-attention layer all of
# > the keys, values and queries come from the same place, in this case, the
# > output of the previous layer in the encoder. Each position in the encoder
# > can attend to all positions in the previous layer of the encoder." (§3.2.3)
#
# $$Q = K = V = \text{encoder input (or previous encoder layer)}, \qquad
# M = \text{padding mask of the source}$$

# %%
plot_attention_weights(source_tokens, source_tokens, weights, layer_name=f"encoder_layer{model.config.num_layers}")

# %% [markdown]
# ### Masked decoder self-attention
#
# > "Similarly, self-attention layers in the decoder allow each position in the
# > decoder to attend to all positions in the decoder up to and including that
# > position." (§3.2.3)
#
# $$Q = K = V = \text{the right-shifted target}, \qquad
# M = \max(\text{look-ahead}, \text{target padding})$$
#
# The look-ahead mask of section 5 leaves the upper triangle at 0 (the
# `assert` checks it):

# %%
block1 = weights["decoder_layer1_block1"].numpy()  # (1, heads, target_len, target_len)
print("largest weight above the diagonal:", np.triu(block1, k=1).max())
assert np.triu(block1, k=1).max() < 1e-6
plot_attention_weights(decoder_input_tokens, labels, block1, layer_name="decoder_layer1_block1")

# %% [markdown]
# ### The three side by side
#
# One sentence pair, the last layer of each kind, the mean of its heads, in
# the paper's order. The hatched cells of the masked self-attention are the
# future, which the look-ahead mask hides.

# %%
last = c.num_layers
plot_three_uses(source_tokens, labels, decoder_input_tokens,
                encoder_self=weights[f"encoder_layer{last}"][0].numpy().mean(0),
                decoder_self=weights[f"decoder_layer{c.decoder_layers}_block1"][0].numpy().mean(0),
                encoder_decoder=weights[f"decoder_layer{c.decoder_layers}_block2"][0].numpy().mean(0),
                description=f"last layers, mean of the {c.num_heads} heads")

# %% [markdown]
# ### Do the heads differ?
#
# For each layer and kind of attention, the mean distance between the rows of
# two heads, over every pair of heads: half the sum of the absolute
# differences of two rows of weights, 0 when two heads attend alike, 1 when
# they attend to disjoint tokens. Whether the heads of this run differ is
# what the cell prints; nothing in the training asks them to.

# %%
for name, w in weights.items():
    heads = w[0].numpy()  # (heads, queries, keys)
    pairs = [(a, b) for a in range(len(heads)) for b in range(a + 1, len(heads))]
    distance = [0.5 * np.abs(heads[a] - heads[b]).sum(-1).mean() for a, b in pairs]
    print(f"{name:>22}: mean distance between heads {np.mean(distance):.2f} "
          f"(closest pair {min(distance):.2f}, farthest {max(distance):.2f})")

# %% [markdown]
# ## 8. Exercises
#
# **1. Remove the look-ahead mask.** Make the decoder's self-attention blind to
# nothing: replace the mask it builds with zeros, for example
# `transformer.attention.create_look_ahead_mask = lambda size: tf.zeros((size, size))`
# in a fresh kernel before building the model, and train a short run
# (`RunConfig(output_dir="runs/no_mask", epochs=2, steps_per_epoch=100)`). Watch
# the training loss, then translate a sentence. What happens, and why?
#
# <details><summary>Answer</summary>
#
# Both losses are computed with teacher forcing: position $i$ of the decoder
# input is target token $i$, and its label is token $i + 1$. Without the mask,
# position $i$ can read token $i + 1$ at position $i + 1$ of the input, so the
# model can lower the losses by copying instead of translating: compare them
# with the masked run's. At translation time there is no future to copy, only
# the tokens produced so far, which is not what the model learnt to read. A
# training loss too good to be true is the usual sign of this bug (and of the
# inverted Keras mask of section 5).
#
# </details>
#
# **2. An out-of-grammar word.** Translate "o gato amarelo come o bolo"
# ("amarelo", yellow, is not in the toy grammar) and print its source tokens.
# How does the tokenizer handle the unknown word, and what does the model make
# of it?
#
# <details><summary>Answer</summary>
#
# SentencePiece does not refuse the word: it spells it with smaller pieces of
# its vocabulary, which the model never saw in that place. The cell below
# prints the pieces, whether an `[UNK]` came out, the translation, and the
# translation of the same sentence without "amarelo": the words that differ are
# what the unknown word did. The translation itself does not say that anything
# was unknown; the model knows only the grammar it was trained on.
#
# </details>

# %%
unknown = translator("o gato amarelo come o bolo")
known = translator("o gato come o bolo")
pieces = tokenize("amarelo", translator.tokenizers.source)[1][1:-1]  # without [START] and [END]
print("source tokens:", unknown.input_tokens)
print(f"'amarelo' is {len(pieces)} pieces {pieces}; [UNK] among the source tokens: {'[UNK]' in unknown.input_tokens}")
print(f"without 'amarelo': {known.text!r}")
print(f"with 'amarelo':    {unknown.text!r}")
lost, added = (list((a - b).elements()) for a, b in ((Counter(known.text.split()), Counter(unknown.text.split())),
                                                       (Counter(unknown.text.split()), Counter(known.text.split()))))
print(f"words lost: {lost or 'none'}; words added: {added or 'none'}")

# %% [markdown]
# **3. The temperature of a lookup (attention, §3.2).** Take the tutorial's
# keys and the query $q = [0, 10, 1]$, which matches key 2 best and key 3 a
# little. Multiply the query by 0.1, 1 and 10 and print the weights. When is
# attention a `dict` lookup, and when an average?
#
# <details><summary>Answer</summary>
#
# Scaling the query scales every score, which is the inverse of a softmax
# temperature: large scores make the lookup hard (all weight on the best key,
# a `dict`), small ones make it soft (an average of all the values, uniform at
# the limit). This is also why the scaling by $\sqrt{d_k}$ matters: it sets
# the temperature. The cell prints the three rows of weights.
#
# </details>

# %%
for factor in (0.1, 1, 10):
    _, w = scaled_dot_product_attention(factor * tf.constant([[0, 10, 1]], tf.float32), temp_k, temp_v)
    print(f"query x {factor:>4}: weights {w.numpy()[0].round(3)}")

# %% [markdown]
# **4. The offsets compose (positional encoding, §3.5).** With the rotation
# matrices $M_k$ of section 2, check that $M_j M_k = M_{j+k}$ and that
# $M_k^\top M_k = I$. What does each say about relative positions?
#
# <details><summary>Answer</summary>
#
# $M_j M_k = M_{j+k}$: moving by $k$ then by $j$ is moving by $j + k$, so one
# family of matrices covers every offset. $M_k^\top M_k = I$: each $M_k$ is a
# rotation, which keeps lengths, so every position's encoding has the same
# norm and the offset, not the position, sets the dot product of two encodings
# (section 2's similarity figure). The cell computes both.
#
# </details>

# %%
def rotation(offset):
    """M_offset: maps PE(p) to PE(p + offset), a 2 x 2 rotation per pair of columns."""
    m = np.zeros((d, d))
    for pair, w in enumerate(omega):
        c_, s_ = np.cos(w * offset), np.sin(w * offset)
        m[2 * pair:2 * pair + 2, 2 * pair:2 * pair + 2] = [[c_, s_], [-s_, c_]]
    return m


print(f"max |M_2 M_5 - M_7| = {np.abs(rotation(2) @ rotation(5) - rotation(7)).max():.1e}, "
      f"max |M_5^T M_5 - I| = {np.abs(rotation(5).T @ rotation(5) - np.eye(d)).max():.1e}")

# %% [markdown]
# **5. Concatenation, then $W^O$ (§3.2.2).** Show that
# $\mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)W^O = \sum_i \mathrm{head}_i W^O_i$,
# where $W^O_i$ is the block of $d_k$ rows of $W^O$ that head $i$'s columns
# meet, on the trained model's first encoder layer.
#
# <details><summary>Answer</summary>
#
# A matrix product of a row split into blocks is the sum of the blocks'
# products. So multi-head attention is $h$ attentions, each with its own
# output projection $W_i^V W^O_i$ from $d_{model}$ to $d_{model}$, added
# together. The cell computes both sides from the layer's weights.
#
# </details>

# %%
layer_mha = model.encoder.enc_layers[0].self_attention.mha
x_embedded = model.encoder.pos_embedding(source_ids)  # (1, n, d_model)
k_h, v_h = layer_mha.project_keys_values(x_embedded, x_embedded)
head_outputs, _ = scaled_dot_product_attention(layer_mha.split_heads(layer_mha.wq(x_embedded), 1), k_h, v_h)
heads_np = head_outputs[0].numpy()  # (h, n, d_k)
w_o = layer_mha.dense.kernel.numpy()  # (d_model, d_model)
d_head = layer_mha.depth
summed = sum(heads_np[i] @ w_o[i * d_head:(i + 1) * d_head] for i in range(layer_mha.num_heads))
concatenated = layer_mha.combine_heads(head_outputs, 1)[0].numpy() @ w_o
print(f"max |Concat(heads) W^O - sum_i head_i W^O_i| = {np.abs(concatenated - summed).max():.1e}")

# %% [markdown]
# **6. A row with no choice (§3.2.3).** In the masked decoder self-attention,
# which row's weights are the same in every head and every trained model, and
# why?
#
# <details><summary>Answer</summary>
#
# The first: the position of `[START]` may only attend to itself, so its one
# allowed weight is 1 whatever the scores. The cell prints the first row of
# every head of every decoder layer for the sentence of section 7.
#
# </details>

# %%
for i in range(1, model.config.decoder_layers + 1):
    print(f"decoder_layer{i}_block1, first row of each head:",
          weights[f"decoder_layer{i}_block1"][0, :, 0, :3].numpy().round(3).tolist())

# %% [markdown]
# **7. Why self-attention without projections looks at itself (self-attention, §2).**
# Section 2 counted the tokens that, with $Q = K = V = X$ and no learned
# projections, put their largest weight on themselves. Show why from the
# Cauchy-Schwarz inequality, and print for each token its score with itself
# and its largest score with another token.
#
# <details><summary>Answer</summary>
#
# $x_i \cdot x_j \le \|x_i\|\,\|x_j\|$, with equality only when $x_j$ points
# the same way as $x_i$. So when the rows have similar norms, a token's score
# with itself, $\|x_i\|^2$, beats its scores with the others; a token loses to
# another only if that one is both longer and close in direction. That is why
# self-attention needs the learned $W^Q$ and $W^K$: with them the query and
# the key of a token are different vectors. The cell prints both scores.
#
# </details>

# %%
rows = model.encoder.pos_embedding(source_ids)[0].numpy()  # (n, d_model): Q = K = V
scores_xx = rows @ rows.T  # (n, n)
others = np.where(np.eye(len(rows), dtype=bool), -np.inf, scores_xx).max(axis=1)
for token, own, other in zip(source_tokens, np.diag(scores_xx), others, strict=True):
    print(f"{token:>8}: with itself {own:7.1f}, best other {other:7.1f}", "" if own > other else "<- loses")

# %% [markdown]
# Notebook 02 trains this model step by step, translates with it and looks at
# more sentences; notebook 03 writes every layer of it by hand.
