"""The latent-topic mixture (`topics.py`): on planted questions whose embeddings are noisy around their topic's
centre, a topic's centre averages the noise out where single neighbours do not."""
from __future__ import annotations

import numpy as np
from fixtures.planted_llms import topic_questions

from engine.tasks.model_ranking import data, mllm, topics
from engine.tasks.model_ranking.study import out_of_fold
from engine.tasks.model_ranking.transfer import column_prior, transfer


def _planted(seed: int, signal: bool = True):
    emb, grades = topic_questions(seed, signal, topics=6, per_topic=20, m=20, noise=1.2, first_expert=3,
                                  relevant=(0.9, 0.6, 0.4))
    gain = data.grade_gains(data.DEFAULT_TARGETS)
    return emb, grades, np.vectorize(gain.get, otypes=[float])(grades), gain


def test_mixture_beats_the_prior_and_nearest_neighbours_where_embeddings_are_noisy():
    """Out of fold, the topic mixture ranks each topic's expert above the prior on both metrics and at least as
    well as transfer from the nearest questions (k=10, T=0.1) on nDCG@10."""
    emb, grades, scores, gain = _planted(0)
    n, m = grades.shape

    def score(fold):
        return mllm.scores_of(grades, gain, out_of_fold(fold, n, m, 5, 0))
    prior = score(lambda tr, te: np.tile(column_prior(scores[tr]), (len(te), 1)))
    near = score(lambda tr, te: transfer(emb[te] @ emb[tr].T, scores[tr], column_prior(scores[tr]), mllm.FIXED))
    mix = score(lambda tr, te: topics.topic_mixture(emb[tr], scores[tr], emb[te]))
    assert mix["ndcg@10"] > prior["ndcg@10"] + 0.1 and mix["mrr"] > prior["mrr"] + 0.05, (mix, prior)
    assert mix["ndcg@10"] >= near["ndcg@10"], (mix, near)


def test_mixture_is_deterministic_shrinks_to_the_prior_and_skips_unknown_targets():
    """The same inputs give the same predictions; with one component per quarter of the questions at most, a
    question far from every centre still gets finite predictions; an unknown (NaN) target is left out of its
    component's mean (an LLM nobody judged predicts 0, never NaN)."""
    emb, _, scores, _ = _planted(1)
    tr, te = np.arange(0, 120, 2), np.arange(1, 120, 2)
    first = topics.topic_mixture(emb[tr], scores[tr], emb[te])
    assert np.array_equal(first, topics.topic_mixture(emb[tr], scores[tr], emb[te]))
    assert first.shape == (len(te), scores.shape[1]) and np.isfinite(first).all()
    few = topics.mixture(emb[tr[:8]], scores[tr[:8]], emb[te], k=32)  # capped at 2 components
    assert np.isfinite(few).all()
    holes = scores[tr].copy()
    holes[:, 5] = np.nan
    got = topics.topic_mixture(emb[tr], holes, emb[te])
    assert np.isfinite(got).all() and np.allclose(got[:, 5], 0.0)
