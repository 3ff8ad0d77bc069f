"""Reliability diagrams: the bins equal a loop transcription of docs/metrics.md's binning,
reproduce the ECE, and are stored in every shard for every stage (issue 11)."""

import math

import numpy as np
import pytest
import torch

from calibench.measure import stages as C
from calibench.metrics import ece
from calibench.metrics.reliability import reliability, reliability_batch
from conftest import sample_problem


def _loop_bins(probs, labels, n_bins):
    """Plain transcription: top-label confidence into (lo, hi], the first bin [0, hi]."""
    count = [0] * n_bins
    conf = [0.0] * n_bins
    hit = [0.0] * n_bins
    for p, y in zip(probs, labels):
        pred = int(np.argmax(p))
        c = float(p[pred])
        b = 0
        for j in range(n_bins):
            if c > j / n_bins:  # right-closed: a value on an edge stays in the lower bin
                b = j
        count[b] += 1
        conf[b] += c
        hit[b] += float(pred == y)
    mean = [(s / n if n else math.nan) for s, n in zip(conf, count)]
    acc = [(s / n if n else math.nan) for s, n in zip(hit, count)]
    return np.array(count, float), np.array(mean), np.array(acc)


@pytest.mark.parametrize("n_bins", [1, 4, 15, 40])
def test_bins_equal_a_loop_and_give_the_ece(n_bins):
    rng = np.random.default_rng(n_bins)
    logits, labels = sample_problem(rng, 700, 6, label_temperature=1.7)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    probs[:5, 0] = 0.5  # values on bin edges
    probs[:5, 1:] = 0.5 / 5
    got = reliability(probs, labels, n_bins)
    count, conf, acc = _loop_bins(probs, labels, n_bins)
    np.testing.assert_array_equal(got["count"], count)
    np.testing.assert_allclose(got["confidence"], conf, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got["accuracy"], acc, rtol=0, atol=1e-12)
    assert got["count"].sum() == len(labels)
    gap = np.nansum(got["count"] * np.abs(got["accuracy"] - got["confidence"])) / len(labels)
    assert gap == pytest.approx(ece(probs, labels, n_bins), abs=1e-12)


def test_batched_and_stage_outputs():
    rng = np.random.default_rng(5)
    nets = [sample_problem(np.random.default_rng(s), 1000, 5, label_temperature=t) for s, t in [(1, 2.0), (2, 0.7)]]
    labels = nets[0][1]
    z = torch.from_numpy(np.stack([n[0] for n in nets]))
    batch = reliability_batch(z, labels)
    assert batch["count"].shape == (2, 15) and np.all(batch["count"].sum(1) == 1000)
    out = C.measure_stages_batch(z, labels, bins=(15,), stages=("pre", "post", "hist"))
    _, test = C.split_indices(1000)
    for stage in ("pre", "post", "hist"):
        rel = out["reliability"][stage]
        assert rel["count"].shape == (2, 15) and np.all(rel["count"].sum(1) == len(test)), stage
        gap = np.nansum(rel["count"] * np.abs(rel["accuracy"] - rel["confidence"]), axis=1) / len(test)
        np.testing.assert_allclose(gap, out[stage]["ece_15"], rtol=0, atol=1e-12, err_msg=stage)
    direct = reliability_batch(z[:, test], labels[test])
    for key in direct:
        np.testing.assert_array_equal(out["reliability"]["pre"][key], direct[key])
    # temperature scaling of an overconfident network moves mass out of the top bin
    assert out["reliability"]["post"]["count"][0, -1] < out["reliability"]["pre"]["count"][0, -1]
    del rng


def test_empty_bins_and_bad_bin_count():
    probs = np.array([[0.9, 0.1], [0.8, 0.2]])
    got = reliability(probs, [0, 1], 5)
    assert got["count"].tolist() == [0, 0, 0, 1, 1]
    assert np.isnan(got["confidence"][:3]).all() and np.isnan(got["accuracy"][:3]).all()
    assert got["accuracy"][3:].tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="n_bins"):
        reliability(probs, [0, 1], 0)


def test_the_shard_key_names_the_reliability_bins():
    from calibench.metrics.reliability import RELIABILITY_BINS
    from calibench.config.settings import measurement_settings

    config = {"bins": [15], "tace_threshold": 0.01, "temperature": {"method": "nll"}, "stages": ["pre"]}
    assert measurement_settings(config)["reliability_bins"] == RELIABILITY_BINS
