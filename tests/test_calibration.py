"""Split and temperature scaling (docs/metrics.md, "Temperature scaling")."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax

import reference as R
from calibench.measure import stages as C
from conftest import sample_problem


def test_split_follows_the_spec_exactly():
    for n, seed in [(10, 42), (10_000, 42), (6_000, 7), (1_001, 0)]:
        order = np.arange(n)
        np.random.RandomState(seed).shuffle(order)
        val, test = C.split_indices(n, seed=seed)
        n_val = int(np.floor(0.2 * n))
        assert len(val) == n_val and len(test) == n - n_val
        np.testing.assert_array_equal(val, order[:n_val])
        np.testing.assert_array_equal(test, order[n_val:])
    val, test = C.split_indices(10)
    np.testing.assert_array_equal(val, [8, 1])  # RandomState(42) on arange(10)
    assert sorted(np.r_[val, test]) == list(range(10))


def _quasi_sampled(temperature, rows=10, repeats=500, k=10, seed=0):
    """Logits whose labels follow softmax(logits / T) exactly, up to rounding of the counts.

    Each of ``rows`` logit vectors is repeated ``repeats`` times and its labels are
    allotted to the classes in proportion to the tempered softmax (largest remainder).
    """
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(rows, k)) * 3
    logits, labels = [], []
    for row in base:
        p = R.softmax(row[None] / temperature)[0] * repeats
        counts = np.floor(p).astype(int)
        for c in np.argsort(-(p - counts))[: repeats - counts.sum()]:
            counts[c] += 1
        logits.append(np.repeat(row[None], repeats, axis=0))
        labels.append(np.repeat(np.arange(k), counts))
    return np.concatenate(logits), np.concatenate(labels)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7, 3.0])
def test_known_temperature_is_recovered_within_one_percent(temperature):
    logits, labels = _quasi_sampled(temperature)
    assert len(labels) == 5000
    assert C.fit_temperature(logits, labels) == pytest.approx(temperature, rel=0.01)


def _scipy_argmin(logits, labels):
    def nll(beta):
        return -log_softmax(beta * logits, axis=1)[np.arange(len(labels)), labels].mean()

    res = minimize_scalar(nll, bounds=(1 / 20, 1 / 0.05), method="bounded", options={"xatol": 1e-12})
    return 1 / res.x


@pytest.mark.parametrize("temperature,seed", [(0.6, 1), (1.0, 2), (2.5, 3)])
def test_fit_is_the_nll_minimiser(temperature, seed):
    """On randomly sampled labels: the same argmin as scipy's bounded minimiser, near the truth."""
    logits, labels = sample_problem(np.random.default_rng(seed), 5000, 10, label_temperature=temperature)
    fitted = C.fit_temperature(logits, labels)
    assert fitted == pytest.approx(_scipy_argmin(logits, labels), rel=1e-6)
    assert fitted == pytest.approx(temperature, rel=0.08)  # sampling noise of the MLE at N = 5000


def test_all_correct_validation_set_ends_at_the_bound():
    logits = np.eye(10)[np.arange(200) % 10] * 4.0
    labels = np.arange(200) % 10
    assert C.fit_temperature(logits, labels) == pytest.approx(C.T_MIN)


def test_uninformative_logits_end_at_the_upper_bound():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 10)) * 5
    labels = (np.argmax(logits, axis=1) + 1) % 10  # always wrong
    assert C.fit_temperature(logits, labels) == pytest.approx(C.T_MAX)


def test_batched_fit_equals_single_fits():
    rng = np.random.default_rng(4)
    logits = np.stack([sample_problem(rng, 400, 10, t)[0] for t in (0.7, 1.3, 2.0)])
    labels = rng.integers(0, 10, size=400)
    logits[0, np.arange(400), labels] += 3  # one network that is mostly right
    batch = C.fit_temperature_batch(logits, labels)
    for i in range(3):
        assert batch[i] == pytest.approx(C.fit_temperature(logits[i], labels), rel=1e-9)


def _grid_ece_loop(logits, labels):
    best_t, best = None, np.inf
    for t in np.arange(1, 101) / 10:
        e = R.ece(R.softmax(logits / t), labels, 15)
        if e < best:
            best_t, best = t, e
    return best_t


def test_grid_ece_reproduces_the_reference_search():
    for seed, temperature in [(1, 0.5), (2, 2.0)]:
        logits, labels = sample_problem(np.random.default_rng(seed), 300, 5, label_temperature=temperature)
        assert C.fit_temperature(logits, labels, method="grid_ece") == pytest.approx(_grid_ece_loop(logits, labels))


def test_measure_stages_splits_fits_and_measures():
    logits, labels = sample_problem(np.random.default_rng(11), 2000, 10, label_temperature=2.0)
    out = C.measure_stages(logits, labels, bins=(15,))
    val, test = C.split_indices(2000)
    t = C.fit_temperature(logits[val], labels[val])
    assert out["temperature"] == pytest.approx(t, rel=1e-12)
    assert out["accuracy_full"] == pytest.approx((logits.argmax(1) == labels).mean())
    pre = R.ece(R.softmax(logits[test]), labels[test], 15)
    post = R.ece(R.softmax(logits[test] / t), labels[test], 15)
    assert out["pre"]["ece_15"] == pytest.approx(pre, abs=1e-12)
    assert out["post"]["ece_15"] == pytest.approx(post, abs=1e-12)
    assert out["post"]["ece_15"] < out["pre"]["ece_15"] / 2  # scaling fixes a temperature-2 model
    assert out["pre"]["accuracy"] == out["post"]["accuracy"]


def _switched_settings(key: str, default: str, other: str) -> tuple[dict, dict]:
    """The measurement settings of a small config without ``key`` and with ``key: other``; the
    key is left out at its ``default`` (so that runs from before the switch keep their keys)."""
    from calibench.config.settings import measurement_settings

    config = {"bins": [15], "tace_threshold": 1e-3, "temperature": {"method": "nll", "val_fraction": 0.2, "seed": 42},
              "stages": ["pre", "post"]}
    before = measurement_settings(config)
    assert key not in before and measurement_settings({**config, key: default}) == before
    after = measurement_settings({**config, key: other})
    assert after[key] == other
    return before, after


def test_pre_samples_all_measures_pre_on_the_whole_set_and_leaves_the_other_stages():
    """``pre_samples: all`` (Tao et al.'s pre-scaling numbers): pre's metrics and reliability bins
    on every sample, reference-checked; post, vs and the temperature exactly as by default."""
    from calibench.config.settings import stage_measurement_settings

    rng = np.random.default_rng(13)
    logits = torch.from_numpy(rng.normal(size=(2, 900, 6)) * 3)
    labels = rng.integers(0, 6, size=900)
    test = C.split_indices(900)[1]
    default = C.measure_stages_batch(logits, labels, bins=(10, 15), stages=("pre", "post", "vs"))
    whole = C.measure_stages_batch(logits, labels, bins=(10, 15), stages=("pre", "post", "vs"), pre_samples="all")
    for i in range(2):
        z = logits[i].numpy()
        assert whole["pre"]["ece_15"][i] == pytest.approx(R.ece(R.softmax(z), labels, 15), abs=1e-12)
        assert default["pre"]["ece_15"][i] == pytest.approx(R.ece(R.softmax(z[test]), labels[test], 15), abs=1e-12)
        assert whole["pre"]["accuracy"][i] == pytest.approx((z.argmax(1) == labels).mean(), abs=1e-15)
        assert whole["reliability"]["pre"]["count"][i].sum() == 900
        assert default["reliability"]["pre"]["count"][i].sum() == len(test)
    assert whole["pre"]["ece_15"][0] != default["pre"]["ece_15"][0]
    for stage in ("post", "vs"):
        for key, values in default[stage].items():
            np.testing.assert_array_equal(whole[stage][key], values, err_msg=f"{stage} {key}")
    np.testing.assert_array_equal(whole["temperature"], default["temperature"])
    with pytest.raises(ValueError, match="pre_samples: 'whole'; expected 'test_part' or 'all'"):
        C.measure_stages_batch(logits, labels, pre_samples="whole")
    # the settings: absent by default (the keys of runs before it stay), a change of pre's rows only
    before, after = _switched_settings("pre_samples", "test_part", "all")
    assert stage_measurement_settings(after, "pre") != stage_measurement_settings(before, "pre")
    assert stage_measurement_settings(after, "post") == stage_measurement_settings(before, "post")


def test_mce_signed_measures_every_stage_as_tao_et_al_and_leaves_the_other_metrics():
    """``mce: signed`` (docs/metrics.md, "Equal-width bins"): the largest overconfidence over
    the bins, 0 for underconfidence, against a loop-by-loop reading at every bin count; every
    other number of every stage exactly as by default; in the settings only where set."""
    from calibench.config.settings import stage_measurement_settings
    from calibench.metrics import functional as F

    rng = np.random.default_rng(21)
    logits = torch.from_numpy(rng.normal(size=(3, 700, 5)) * np.array([4.0, 0.6, 2.0])[:, None, None])
    labels = rng.integers(0, 5, size=700)
    labels[:500] = logits[1, :500].argmax(-1).numpy()  # network 1: low confidence, mostly right: underconfident
    test = C.split_indices(700)[1]
    bins = (5, 15, 100, 500)
    default = C.measure_stages_batch(logits, labels, bins=bins, stages=("pre", "post", "vs"))
    signed = C.measure_stages_batch(logits, labels, bins=bins, stages=("pre", "post", "vs"), mce="signed")
    for i in range(3):
        P = R.softmax(logits[i].numpy()[test])
        for b in bins:
            assert signed["pre"][f"mce_{b}"][i] == pytest.approx(R.mce_signed(P, labels[test], b), abs=1e-12)
            assert default["pre"][f"mce_{b}"][i] == pytest.approx(R.mce(P, labels[test], b), abs=1e-12)
            assert F.mce(P, labels[test], b, signed=True) == pytest.approx(R.mce_signed(P, labels[test], b), abs=1e-12)
    assert signed["pre"]["mce_15"][1] == 0.0 < default["pre"]["mce_15"][1]  # underconfident in every bin
    assert signed["pre"]["mce_15"][0] == default["pre"]["mce_15"][0] > 0  # its largest gap is an overconfidence
    for stage in ("pre", "post", "vs"):
        for key, values in default[stage].items():
            if key.startswith("mce_"):
                assert (signed[stage][key] <= values).all() and (signed[stage][key] >= 0).all(), (stage, key)
            else:
                np.testing.assert_array_equal(signed[stage][key], values, err_msg=f"{stage} {key}")
    assert F.mce([[.5, .25, .25], [.25, .5, .25], [.25, .25, .5]], [0, 1, 2], 4, signed=True) == 0.0  # spec vector 3
    assert F.mce([[.5, .25, .25], [.5, .25, .25], [.625, .25, .125], [.625, .25, .125]], [0, 0, 1, 2], 4,
                 signed=True) == 0.625  # spec vector 1: its 0.625 is an overconfidence
    with pytest.raises(ValueError, match="mce: 'absolute'; expected one of unsigned, signed"):
        C.measure_stages_batch(logits, labels, mce="absolute")
    # the settings: absent by default (the keys of runs before it stay); every stage's rows measured again
    before, after = _switched_settings("mce", "unsigned", "signed")
    for stage in ("pre", "post"):
        assert stage_measurement_settings(after, stage) != stage_measurement_settings(before, stage)


def test_measure_stages_batch_matches_single():
    rng = np.random.default_rng(12)
    logits = torch.from_numpy(rng.normal(size=(3, 500, 10)) * 3).float()
    labels = rng.integers(0, 10, size=500)
    batch = C.measure_stages_batch(logits, labels, bins=(10,))
    for i in range(3):
        single = C.measure_stages(logits[i], labels, bins=(10,))
        assert batch["temperature"][i] == pytest.approx(single["temperature"], rel=1e-12)
        for stage in ("pre", "post"):
            for key, value in single[stage].items():
                assert batch[stage][key][i] == pytest.approx(value, abs=1e-12, nan_ok=True), (stage, key)


def test_bad_method_and_split_arguments():
    with pytest.raises(ValueError, match="method"):
        C.fit_temperature(np.zeros((4, 2)), [0, 1, 0, 1], method="lbfgs")
    with pytest.raises(ValueError, match="val_fraction"):
        C.split_indices(10, val_fraction=1.5)
    with pytest.raises(ValueError, match="n"):
        C.split_indices(1)
