# Source of notebooks/03_inside.ipynb; rebuild with `python notebooks/build_notebooks.py`.
# ruff: noqa: E402, B018

# %% [markdown]
# # The model opened up
#
# Notebooks 01 and 02 call the library's layers and look at what comes out.
# This one writes each layer again by hand, in a few lines of NumPy, from the
# **trained** weights of notebook 02's toy translator, and checks that the
# hand-written version computes what the library's layer computes:
#
# 1. the whole model, the paper's Figure 1, with this model's sizes;
# 2. the embedding: $\sqrt{d_{model}}$ and the positional encoding (§3.4, §3.5);
# 3. multi-head attention: projections, split, attention per head, concatenation, $W^O$ (§3.2.2);
# 4. the position-wise feed-forward network (§3.3);
# 5. residual connection and layer normalisation (§3.1);
# 6. an encoder layer and a decoder layer (§3.1);
# 7. the whole forward pass, to the logits;
# 8. the masked loss and label smoothing's floor (§5.4);
# 9. exercises, with answers that run.
#
# Every difference between a hand-written result and the library's is printed
# beside the code, and the last figure draws them all. NumPy computes in
# float64 from the float32 weights, so the differences are float32 rounding:
# a cell fails when one exceeds $10^{-5}$ times the largest value compared
# (or $10^{-5}$ when the values are smaller than 1), and the test suite
# checks that every difference stored in this notebook is below $10^{-5}$.
# Dropout is off throughout (`training=False`), as at translation time.

# %%
import os
import sys
from pathlib import Path

# Make `transformer` importable when the notebook runs from the repository or notebooks/.
ROOT = next((p for p in (Path.cwd(), *Path.cwd().parents) if (p / "transformer" / "__init__.py").is_file()), None)
if ROOT is not None and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import keras
import numpy as np
import tensorflow as tf

from transformer import Translator, masked_loss, positional_encoding
from transformer.plot import plot_attention_weights
from transformer.plot.diagrams import plot_multi_head_diagram, plot_transformer_architecture
from transformer.plot.study import plot_label_smoothing, plot_layer_checks, plot_matrices
from transformer.run import RunConfig, train

# TRANSFORMER_NOTEBOOK_QUICK=1 is the small setting of the test suite.
QUICK = os.environ.get("TRANSFORMER_NOTEBOOK_QUICK", "") == "1"
RUNS = Path(os.environ.get("TRANSFORMER_NOTEBOOK_RUNS") or os.path.relpath((ROOT or Path.cwd()) / "runs"))
RUN_DIR = RUNS / ("notebook_toy_quick" if QUICK else "notebook_toy")
keras.utils.set_random_seed(0)
np.set_printoptions(precision=3, suppress=True)
TOLERANCE = 1e-5  # what "equal" means below: the largest absolute difference allowed
checks = {}  # what was written by hand -> its largest difference from the library


def check(name, ours, theirs):
    """Records and prints max |ours - theirs|; fails the cell if it exceeds TOLERANCE
    times the size of the library's values (at least 1), float32's relative precision."""
    theirs = np.asarray(theirs, np.float64)
    difference = float(np.max(np.abs(np.asarray(ours, np.float64) - theirs)))
    scale = max(1.0, float(np.abs(theirs).max()))
    checks[name] = difference
    print(f"{name}: max |by hand - library| = {difference:.1e} (largest |value| {scale:.1f})",
          "(equal)" if difference < TOLERANCE else "(equal up to float32 rounding of large values)"
          if difference < TOLERANCE * scale else "(NOT EQUAL)")
    assert difference < TOLERANCE * scale, name


print(f"setting: {'quick' if QUICK else 'full'}")

# %% [markdown]
# ## 1. The model
#
# > "The Transformer follows this overall architecture using stacked
# > self-attention and point-wise, fully connected layers for both the encoder
# > and decoder, shown in the left and right halves of Figure 1, respectively."
# > (§3)
#
# The next cell loads notebook 02's run (or trains it with the same settings)
# and draws Figure 1 with this model's sizes: the shapes beside the boxes are
# written `(b, n, ...)` for a batch of `b` source sentences of `n` tokens and
# `(b, m, ...)` for the targets.

# %%
if not (RUN_DIR / "model.keras").is_file():
    steps = (dict(epochs=2, steps_per_epoch=15, warmup_steps=20, eval_batch_size=256) if QUICK
             else dict(epochs=10, steps_per_epoch=125))
    train(RunConfig(output_dir=str(RUN_DIR), precision="float32", **steps),
          resume=RUN_DIR.exists(), verbose=0, export=False)
translator = Translator.from_run(RUN_DIR)
model = translator.transformer
cfg = model.config
d_model, num_heads, depth = cfg.d_model, cfg.num_heads, cfg.d_model // cfg.num_heads
print(f"{cfg.num_layers} encoder and {cfg.decoder_layers} decoder layers, d_model={d_model}, "
      f"{num_heads} heads of depth {depth}, dff={cfg.dff}, normalize_first={cfg.normalize_first}")
source_vocab = int(translator.tokenizers.source.get_vocab_size())
target_vocab = int(translator.tokenizers.target.get_vocab_size())
plot_transformer_architecture(cfg.num_layers, d_model, num_heads, cfg.dff, source_vocab, target_vocab,
                              num_decoder_layers=cfg.decoder_layers)

# %% [markdown]
# The sentence pair used throughout, tokenized: the source for the encoder,
# the reference translation shifted right for the decoder (`[START]` first,
# as in training). `▁` marks the start of a word in SentencePiece's pieces.

# %%
def tokenize(sentence, tokenizer):
    ids = tokenizer.tokenize(tf.constant([sentence])).to_tensor()  # (1, seq_len)
    return ids, [token.decode() for token in tokenizer.lookup(ids)[0].numpy()]


source_ids, source_tokens = tokenize("o gato preto come o bolo", translator.tokenizers.source)
target_ids, target_tokens = tokenize("the black cat eats the cake", translator.tokenizers.target)
decoder_ids, labels = target_ids[:, :-1], target_ids[:, 1:]  # (1, m): input and what it must predict
print(source_tokens)
print(target_tokens[:-1], "(decoder input)")


def weights_of(dense):
    """A Dense layer's kernel and bias as float64 arrays."""
    return dense.kernel.numpy().astype(np.float64), dense.bias.numpy().astype(np.float64)

# %% [markdown]
# ## 2. The embedding (§3.4, §3.5)
#
# > "we use learned embeddings to convert the input tokens and output tokens to
# > vectors of dimension $d_{model}$. [...] In the embedding layers, we multiply
# > those weights by $\sqrt{d_{model}}$." (§3.4) "we add 'positional encodings'
# > to the input embeddings at the bottoms of the encoder and decoder stacks."
# > (§3.5)
#
# $$x_{pos} = \sqrt{d_{model}}\; E[\text{token}_{pos}] + PE_{pos}$$

# %%
E = model.encoder.pos_embedding.embedding.embeddings.numpy().astype(np.float64)  # (vocab, d_model)
ids = source_ids[0].numpy()
x_hand = E[ids] * np.sqrt(d_model) + positional_encoding(len(ids), d_model)  # (n, d_model)
x_library = model.encoder.pos_embedding(source_ids)[0]  # (n, d_model)
check("embedding × √d_model + PE", x_hand, x_library)
print(f"mean norm of a row: E[token] {np.linalg.norm(E[ids], axis=1).mean():.2f}, "
      f"√d_model E[token] {np.linalg.norm(E[ids] * np.sqrt(d_model), axis=1).mean():.2f}, "
      f"PE {np.linalg.norm(positional_encoding(len(ids), d_model), axis=1).mean():.2f} (always √(d_model/2) = {np.sqrt(d_model / 2):.2f})")

# %% [markdown]
# Every row of the positional encoding has the same length, $\sqrt{d_{model}/2}$
# (a sine and a cosine of the same angle per pair of columns). The line above
# compares it with the learned embedding rows before and after the scaling.

# %% [markdown]
# ## 3. Multi-head attention by hand (§3.2.2)
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)W^O,
# \qquad \mathrm{head}_i = \mathrm{softmax}\!\left(\frac{QW_i^Q (KW_i^K)^\top}{\sqrt{d_k}} + M\cdot(-10^9)\right) VW_i^V$$
#
# The library keeps all $W_i^Q$ side by side in one $d_{model} \times d_{model}$
# matrix (`wq`), so "project for every head" is one matrix product, and
# "head $i$" is columns $i \cdot d_k$ to $(i+1) \cdot d_k$ of its output: a
# reshape to `(seq, h, d_k)` and a transpose to `(h, seq, d_k)`. The figure
# draws it with this model's shapes for the sentence above; the code below
# follows it step by step, with the first encoder layer's trained weights.

# %%
plot_multi_head_diagram(d_model, num_heads, seq_len_q=len(ids), seq_len_k=len(ids))

# %%
def softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)


def multi_head_attention(mha, q_in, kv_in, mask=None):
    """transformer.MultiHeadAttention in NumPy: (seq_q, d_model), (seq_k, d_model) -> output, weights."""
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (weights_of(d) for d in (mha.wq, mha.wk, mha.wv, mha.dense))
    h, d_k = mha.num_heads, mha.depth

    def split(x):  # (seq, d_model) -> (h, seq, d_k)
        return x.reshape(len(x), h, d_k).transpose(1, 0, 2)

    q, k, v = split(q_in @ wq + bq), split(kv_in @ wk + bk), split(kv_in @ wv + bv)  # (h, seq, d_k)
    logits = q @ k.transpose(0, 2, 1) / np.sqrt(d_k)  # (h, seq_q, seq_k)
    if mask is not None:
        logits = logits + mask * -1e9  # 1 = not allowed
    weights = softmax(logits)  # (h, seq_q, seq_k)
    heads = weights @ v  # (h, seq_q, d_k)
    concat = heads.transpose(1, 0, 2).reshape(len(q_in), h * d_k)  # (seq_q, d_model): Concat
    return concat @ wo + bo, weights  # (seq_q, d_model): W^O


layer1 = model.encoder.enc_layers[0]
mha = layer1.self_attention.mha
x = x_library.numpy().astype(np.float64)  # the embedded source, (n, d_model)
out_hand, weights_hand = multi_head_attention(mha, x, x)
out_library, weights_library = mha(x_library[None], x_library[None], x_library[None])
check("multi-head attention: weights", weights_hand, weights_library[0])
check("multi-head attention: output", out_hand, out_library[0])

# %% [markdown]
# The weights by hand, head by head, drawn with the library's plotting
# function: they are the first encoder layer's self-attention weights for this
# sentence.

# %%
plot_attention_weights(source_tokens, source_tokens, weights_hand)

# %% [markdown]
# ## 4. The position-wise feed-forward network (§3.3)
#
# > "each of the layers in our encoder and decoder contains a fully connected
# > feed-forward network, which is applied to each position separately and
# > identically. This consists of two linear transformations with a ReLU
# > activation in between." (§3.3)
#
# $$\mathrm{FFN}(x) = \max(0,\ xW_1 + b_1)\,W_2 + b_2, \qquad
# W_1: d_{model} \times d_{ff}, \quad W_2: d_{ff} \times d_{model}$$

# %%
def feed_forward(ffn, x):
    (w1, b1), (w2, b2) = weights_of(ffn.dense1), weights_of(ffn.dense2)
    return np.maximum(0, x @ w1 + b1) @ w2 + b2  # (seq, dff) -> (seq, d_model)


check("feed-forward", feed_forward(layer1.ffn, x), layer1.ffn(x_library[None])[0])
hidden = np.maximum(0, x @ weights_of(layer1.ffn.dense1)[0] + weights_of(layer1.ffn.dense1)[1])  # (n, dff)
print(f"{(hidden == 0).mean():.0%} of the {cfg.dff} hidden units are 0 after the ReLU, on this sentence")
plot_matrices({"input x": x, f"hidden max(0, x W1 + b1): {cfg.dff} units": hidden,
               "output FFN(x)": feed_forward(layer1.ffn, x)}, source_tokens,
              "The first encoder layer's feed-forward network, position by position")

# %% [markdown]
# ## 5. Residual connection and layer normalisation (§3.1)
#
# > "We employ a residual connection around each of the two sub-layers,
# > followed by layer normalization. That is, the output of each sub-layer is
# > $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$" (§3.1)
#
# $$\mathrm{LayerNorm}(z) = \gamma \odot \frac{z - \mu(z)}{\sqrt{\sigma^2(z) + \epsilon}} + \beta,
# \qquad \mu, \sigma^2 \text{ over the } d_{model} \text{ features of one position}, \ \epsilon = 10^{-6}$$
#
# (This run is post-norm, the paper's; `normalize_first=True` would move the
# normalisation before the sublayer: $x + \mathrm{Sublayer}(\mathrm{LayerNorm}(x))$.)

# %%
def layer_norm(norm, z):
    mean, variance = z.mean(axis=-1, keepdims=True), z.var(axis=-1, keepdims=True)
    return norm.gamma.numpy() * (z - mean) / np.sqrt(variance + norm.epsilon) + norm.beta.numpy()


block = layer1.self_attention  # multi-head attention, residual, layer norm
check("residual + layer norm", layer_norm(block.layernorm, x + out_hand), block(x_library[None], training=False)[0][0])
after = layer_norm(block.layernorm, x + out_hand)
print(f"per-position std of the features: {(x + out_hand).std(axis=-1).mean():.2f} before the "
      f"normalisation, {after.std(axis=-1).mean():.2f} after (γ and β are learnt)")
plot_matrices({"x": x, "x + MultiHead(x)": x + out_hand, "LayerNorm(x + MultiHead(x))": after},
              source_tokens, "Residual connection and layer normalisation, first encoder layer")

# %% [markdown]
# ## 6. An encoder layer and a decoder layer (§3.1)
#
# > "Each layer has two sub-layers. The first is a multi-head self-attention
# > mechanism, and the second is a simple, position-wise fully connected
# > feed-forward network." (§3.1, the encoder)
#
# $$h = \mathrm{LayerNorm}_1(x + \mathrm{MultiHead}(x, x, x)), \qquad
# \mathrm{EncoderLayer}(x) = \mathrm{LayerNorm}_2(h + \mathrm{FFN}(h))$$
#
# > "In addition to the two sub-layers in each encoder layer, the decoder
# > inserts a third sub-layer, which performs multi-head attention over the
# > output of the encoder stack." (§3.1, the decoder)
#
# $$a = \mathrm{LN}_1(y + \mathrm{MultiHead}(y, y, y; M_{\text{look-ahead}})), \quad
# c = \mathrm{LN}_2(a + \mathrm{MultiHead}(a, z, z; M_{\text{source pad}})), \quad
# \mathrm{DecoderLayer}(y, z) = \mathrm{LN}_3(c + \mathrm{FFN}(c))$$

# %%
def encoder_layer(layer, x, mask=None):
    attention = layer.self_attention
    h = layer_norm(attention.layernorm, x + multi_head_attention(attention.mha, x, x, mask)[0])
    return layer_norm(layer.ffn_layernorm, h + feed_forward(layer.ffn, h))


def decoder_layer(layer, y, z, look_ahead, source_mask=None):
    masked, cross = layer.causal_self_attention, layer.cross_attention
    a = layer_norm(masked.layernorm, y + multi_head_attention(masked.mha, y, y, look_ahead)[0])
    c = layer_norm(cross.layernorm, a + multi_head_attention(cross.mha, a, z, source_mask)[0])
    return layer_norm(layer.ffn_layernorm, c + feed_forward(layer.ffn, c))


check("encoder layer", encoder_layer(layer1, x), layer1(x_library[None], training=False)[0][0])

z = model.encoder(source_ids, training=False)[0]  # the encoder's output, (1, n, d_model)
y_library = model.decoder.pos_embedding(decoder_ids)  # the embedded decoder input, (1, m, d_model)
m = y_library.shape[1]
look_ahead = np.triu(np.ones((m, m)), k=1)  # 1 above the diagonal: the future is not allowed
dec1 = model.decoder.dec_layers[0]
check("decoder layer", decoder_layer(dec1, y_library[0].numpy().astype(np.float64), z[0].numpy(), look_ahead),
      dec1(y_library, z, training=False)[0][0])

# %% [markdown]
# ## 7. The whole forward pass
#
# The encoder is the embedding and its layers; the decoder the same with its
# layers; a linear layer turns the decoder's output into one logit per target
# token (Figure 1). Written with the functions above, for the sentence pair:

# %%
def forward(source, target):
    """Logits (m, target_vocab) for one sentence pair of token ids, by hand."""
    x = E[source] * np.sqrt(d_model) + positional_encoding(len(source), d_model)
    source_mask = (source == 0).astype(np.float64)[None, None, :]  # (1, 1, n): 1 at padding
    for layer in model.encoder.enc_layers:
        x = encoder_layer(layer, x, source_mask)
    E_target = model.decoder.pos_embedding.embedding.embeddings.numpy().astype(np.float64)
    y = E_target[target] * np.sqrt(d_model) + positional_encoding(len(target), d_model)
    look_ahead = np.maximum(np.triu(np.ones((len(target), len(target))), k=1), (target == 0)[None, None, :])
    for layer in model.decoder.dec_layers:
        y = decoder_layer(layer, y, x, look_ahead, source_mask)
    w, b = weights_of(model.final_layer)
    return y @ w + b  # (m, target_vocab)


if cfg.normalize_first or cfg.tie_embeddings:
    print("this run uses pre-norm or tied embeddings; the hand-written pass above is the post-norm, untied one")
logits_hand = forward(ids, decoder_ids[0].numpy())
logits_library = model((source_ids, decoder_ids), training=False)[0]
check("the whole model: logits", logits_hand, logits_library)
predicted = translator.tokenizers.target.lookup(tf.constant([logits_hand.argmax(-1)]))[0].numpy()
print("predicted by hand:", [t.decode() for t in predicted])

# %% [markdown]
# ## 8. The masked loss and label smoothing's floor (§5.4)
#
# Batches are padded with `[PAD]` (id 0) to their longest sentence. The loss is
# the cross-entropy of each real target token, averaged over the real tokens
# only; padding counts neither in the sum nor in the count:
#
# $$\mathcal{L} = \frac{\sum_{t} [y_t \ne 0]\; \ell_t}{\sum_{t} [y_t \ne 0]}, \qquad
# \ell_t = -\sum_{v} q_v \log p_v, \qquad
# q = (1 - \epsilon_{ls})\,\mathrm{onehot}(y_t) + \epsilon_{ls} / V$$
#
# > "During training, we employed label smoothing of value $\epsilon_{ls} = 0.1$.
# > This hurts perplexity, as the model learns to be more unsure, but improves
# > accuracy and BLEU score." (§5.4)
#
# Below, the loss of a padded batch of two sentence pairs by hand, against
# `masked_loss`, with and without smoothing.

# %%
batch_source = tf.concat([source_ids, source_ids], axis=0)  # (2, n)
short_ids, _ = tokenize("the black cat eats", translator.tokenizers.target)
padded = tf.pad(short_ids, [[0, 0], [0, target_ids.shape[1] - short_ids.shape[1]]])  # [PAD]s at the end
batch_target = tf.concat([target_ids, padded], axis=0)  # (2, m + 1)
batch_in, batch_labels = batch_target[:, :-1], batch_target[:, 1:].numpy()
batch_logits = model((batch_source, batch_in), training=False)
logp = tf.nn.log_softmax(batch_logits).numpy().astype(np.float64)  # (2, m, V)
real = batch_labels != 0  # (2, m)
print("labels:", batch_labels.tolist(), f"-> {real.sum()} real tokens, {(~real).sum()} padding")
for eps in (0.0, 0.1):
    q = eps / logp.shape[-1] + (1 - eps) * np.eye(logp.shape[-1])[batch_labels]  # (2, m, V)
    per_token = -(q * logp).sum(-1)  # (2, m)
    check(f"masked loss, eps={eps}", (per_token * real).sum() / real.sum(),
          masked_loss(batch_labels, batch_logits, label_smoothing=eps))

# %% [markdown]
# With $\epsilon_{ls} > 0$ even a perfect model pays a loss: the best it can
# predict is $q$ itself, whose entropy is the floor of the label-smoothed loss.
# The figure draws the target and the floor for this run's vocabulary and
# smoothing; the line above it compares the floor with the last training loss.

# %%
import csv
import json

eps = json.loads((RUN_DIR / "config.json").read_text()).get("label_smoothing", 0.1)
p_right = 1 - eps + eps / target_vocab
floor = -(p_right * np.log(p_right) + (target_vocab - 1) * eps / target_vocab * np.log(eps / target_vocab))
with open(RUN_DIR / "metrics.csv", newline="") as file:
    last_loss = float(list(csv.DictReader(file))[-1]["loss"])
print(f"eps={eps}, V={target_vocab}: floor {floor:.3f} nats; this run's last training loss {last_loss:.3f}")
plot_label_smoothing(target_vocab, eps)

# %% [markdown]
# ## All the checks
#
# Every hand-written piece of this notebook against the library, on the
# trained weights. A bar is green when it is under the tolerance printed
# beside it.

# %%
print(f"{len(checks)} checks, largest difference {max(checks.values()):.1e}, tolerance {TOLERANCE:g}")
plot_layer_checks(checks, TOLERANCE)

# %% [markdown]
# ## 9. Exercises
#
# **1. Count the parameters of an encoder layer.** From the formulas above,
# write the number of weights of one encoder layer in terms of $d_{model}$ and
# $d_{ff}$, then compare with `model.encoder.enc_layers[0].count_params()`.
#
# <details><summary>Answer</summary>
#
# Four $d_{model} \times d_{model}$ projections with their biases
# ($4(d_{model}^2 + d_{model})$), the feed-forward network
# ($d_{model} d_{ff} + d_{ff} + d_{ff} d_{model} + d_{model}$) and two layer
# norms ($2 \cdot 2 d_{model}$). The number of heads does not appear. The cell
# below computes both.
#
# </details>

# %%
formula = 4 * (d_model**2 + d_model) + 2 * d_model * cfg.dff + cfg.dff + d_model + 4 * d_model
print(f"formula: {formula:,}; count_params: {layer1.count_params():,}")
assert formula == layer1.count_params()

# %% [markdown]
# **2. The decoder cannot see the future.** Change the last token of the
# decoder input and run `forward` again. Which rows of the logits change?
#
# <details><summary>Answer</summary>
#
# Only the last: every row before it attends to positions up to itself, and
# the look-ahead mask gives the changed position a weight of 0 in each of
# them. The cell below prints the largest change of each row.
#
# </details>

# %%
changed = decoder_ids[0].numpy().copy()
changed[-1] = 1  # [UNK] instead of the last token
change = np.abs(forward(ids, changed) - logits_hand).max(axis=-1)  # (m,)
print("largest change of each row:", change)
assert change[:-1].max() < TOLERANCE < change[-1]

# %% [markdown]
# **3. Without the scaling.** Remove the `/ np.sqrt(d_k)` from
# `multi_head_attention` and compare its weights for the first encoder layer
# with the library's. How peaked do the rows get?
#
# <details><summary>Answer</summary>
#
# The trained projections were learnt with the scaling, so without it every
# logit is $\sqrt{d_k}$ times larger and each row's softmax sharper. The cell
# below measures it with the mean of each row's largest weight.
# <!-- claim: sharper -->
#
# </details>

# %%
(wq, bq), (wk, bk) = weights_of(mha.wq), weights_of(mha.wk)
q_heads = (x @ wq + bq).reshape(len(x), num_heads, depth).transpose(1, 0, 2)  # (h, n, d_k)
k_heads = (x @ wk + bk).reshape(len(x), num_heads, depth).transpose(1, 0, 2)
unscaled = softmax(q_heads @ k_heads.transpose(0, 2, 1))  # (h, n, n)
print(f"mean largest weight of a row: {weights_hand.max(-1).mean():.2f} scaled, "
      f"{unscaled.max(-1).mean():.2f} without the scaling (d_k = {depth})")
print(f"claim sharper: {'holds' if unscaled.max(-1).mean() > weights_hand.max(-1).mean() else 'DOES NOT HOLD'} "
      "(without the scaling the rows are more peaked)")
