"""Beam search against a brute-force reference where the beam prunes.

The beams are small (2 to 4) and the vocabulary bigger, so every step
drops candidates; sentences stop early once no live hypothesis can beat the
finished ones. The reference below enumerates every extension of every live
hypothesis in plain Python and applies the rules documented in
`transformer.decoding.search.beam_search`, so the whole n-best list (tokens and
scores `log P / lp`) must agree, not only the best answer.
"""

import numpy as np
import pytest
import tensorflow as tf

from transformer.constants import END_ID, PAD_ID, START_ID
from transformer.decoding.search import beam_search, repeat_beams

VOCAB = 9


def _tables(seed, batch):
    """One random bigram table of logits per sentence; [END] likely enough
    that hypotheses finish at different lengths."""
    rng = np.random.default_rng(seed)
    tables = rng.normal(0.0, 1.5, (batch, VOCAB, VOCAB))
    tables[:, :, END_ID] += rng.uniform(-0.5, 1.5, (batch, 1))
    tables[:, :, [PAD_ID, START_ID]] = -30.0
    return tables.astype(np.float32)


def _callback(tables):
    """`next_logits` reading sentence `cache[row]`'s table at the newest token."""
    tables = tf.constant(tables)

    def next_logits(tokens, cache, index):
        return tf.gather_nd(tables, tf.stack([cache, tf.cast(tokens[:, -1], tf.int32)], 1)), cache

    return next_logits


def _penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def _reference(table, k, alpha, limit):
    """Beam search of one sentence by enumeration: `(finished, stopped_early)`,
    `finished` the k best `(score, tokens)`, best first."""
    log_probs = table.astype(np.float64) - np.log(np.exp(table.astype(np.float64)).sum(1))[:, None]
    alive, finished, num_finished = [(0.0, (START_ID,))], [], 0
    for step in range(1, limit + 1):
        candidates = sorted(((lp + log_probs[seq[-1], t], seq + (t,)) for lp, seq in alive
                             for t in range(VOCAB)), reverse=True)[: 2 * k]
        penalty = _penalty(step, alpha)
        ending = [(lp / penalty, seq[1:]) for lp, seq in candidates[:k] if seq[-1] == END_ID]
        num_finished += len(ending)
        finished = sorted(finished + ending, reverse=True)[:k]
        alive = [c for c in candidates if c[1][-1] != END_ID][:k]
        if num_finished >= k and finished[-1][0] >= alive[0][0] / penalty:
            return finished, step < limit
    # At the limit the live hypotheses finish as they are.
    penalty = _penalty(limit, alpha)
    return sorted(finished + [(lp / penalty, seq[1:]) for lp, seq in alive], reverse=True)[:k], \
        False


@pytest.mark.parametrize("k,alpha", [(2, 0.6), (3, 1.5), (4, 0.6), (4, 0.0)])
def test_beam_search_equals_the_enumerated_reference(k, alpha):
    batch = 24
    tables = _tables(k * 10 + int(alpha * 10), batch)
    limits = np.array([3, 5, 8] * (batch // 3), np.int32)
    tokens, scores = beam_search(_callback(tables), repeat_beams(tf.range(batch), k),
                                 tf.constant(limits), k, alpha, n_best=k)
    tokens, scores = tokens.numpy(), scores.numpy()
    early = 0
    for b in range(batch):
        expected, stopped_early = _reference(tables[b], k, alpha, int(limits[b]))
        early += stopped_early
        np.testing.assert_allclose(scores[b], [s for s, _ in expected], rtol=1e-4, atol=1e-5,
                                   err_msg=f"sentence {b}")
        for row, (_, output) in zip(tokens[b], expected, strict=True):
            np.testing.assert_array_equal(row[: len(output)], output, err_msg=f"sentence {b}")
            assert (row[len(output):] == PAD_ID).all()
    assert early >= 3, early  # the stopping rule is exercised, not only the limit


def test_the_reference_prunes():
    """A narrower beam loses hypotheses a wider one keeps: the test above
    checks the pruning, not an exhaustive search."""
    tables = _tables(7, 24)
    differ = sum(_reference(t, 2, 0.6, 8)[0][0] != _reference(t, 4, 0.6, 8)[0][0]
                 for t in tables)
    assert differ >= 1
