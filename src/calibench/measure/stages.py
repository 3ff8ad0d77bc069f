"""Every stage of one evaluation set, measured on the same test part
(docs/metrics.md, "Temperature scaling"; docs/recalibration.md, "Common rules").

``measure_stages_batch`` is what a measurement job calls: split the evaluation set once,
fit every configured post-hoc method (:mod:`calibench.recalibration`) on the validation
part of each network, and measure the whole metric suite on the test part for each
stage: ``pre`` (the network's own softmax), ``post`` (temperature scaling), ``vs``,
``ms``, ``dir``, ``iso``, ``hist``, ``spline``. A method whose fit fails or does not
converge gives NaN for its stage of that network and a reason; the other stages and
networks go on. ``vs``, ``ms``, ``dir``, ``iso`` and ``hist`` record ``fit_underdetermined``
(1 where the validation part is too small for the method, 0 otherwise;
:func:`calibench.recalibration.base.underdetermined`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from calibench.vocabulary import MCE_GAPS, PRE_SAMPLES, SEARCH_FLAG, STAGES
from calibench.metrics._arrays import check_bins, check_logits
from calibench.metrics.reliability import RELIABILITY_BINS, reliability_from_logits
from calibench.metrics.scores import auroc
from calibench.metrics.suite import DEFAULT_BINS, DEFAULT_TACE_THRESHOLD, measure_validated
from calibench.recalibration import STAGE_PARAMS, fit_stage, stage_transform
from calibench.recalibration.base import Fitted, underdetermined
from calibench.recalibration.temperature import T_MAX, T_MIN, fit_temperature, fit_temperature_batch  # noqa: F401 (API)

log = logging.getLogger(__name__)

def split_indices(n: int, val_fraction: float = 0.2, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle ``arange(n)`` with ``RandomState(seed)``; the first ``floor(val_fraction * n)`` validate."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n: need at least 2 samples to split, got {n!r}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction: must lie in (0, 1), got {val_fraction}")
    order = np.arange(n)
    np.random.RandomState(seed).shuffle(order)
    n_val = int(math.floor(val_fraction * n))
    if n_val == 0 or n_val == n:
        raise ValueError(f"val_fraction={val_fraction} of n={n} leaves an empty validation or test part")
    return order[:n_val], order[n_val:]


def _fit_isolated(stage: str, z_val: torch.Tensor, y_val: torch.Tensor, options: Mapping):
    """Fit ``stage`` on all networks at once; if that raises, one network at a time, so a
    network that breaks the fit fails alone. Yields (network indices, Fitted or None, reason)."""
    m = z_val.shape[0]
    try:
        yield list(range(m)), fit_stage(stage, z_val, y_val, options), None
        return
    except Exception as exc:  # noqa: BLE001 - any failure of a numeric fit is isolated and recorded
        if m == 1:
            log.warning("stage %s: fit failed: %s", stage, exc)
            yield [0], None, f"{stage} fit failed: {type(exc).__name__}: {exc}"
            return
        log.warning("stage %s: batched fit failed (%s); fitting network by network", stage, exc)
    for i in range(m):
        for _, fitted, reason in _fit_isolated(stage, z_val[i : i + 1], y_val, options):
            yield [i], fitted, reason


def _padded_stack(arrays: list[np.ndarray]) -> np.ndarray:
    """Per-network parameters stacked; tables of different lengths (isotonic and spline knots)
    padded by repeating their last entry, as a batched fit pads them (the map is unchanged)."""
    width = max(a.shape[-1] for a in arrays) if arrays[0].ndim else 0
    if arrays[0].ndim and any(a.shape[-1] != width for a in arrays):
        arrays = [np.concatenate([a, np.repeat(a[..., -1:], width - a.shape[-1], axis=-1)], axis=-1) for a in arrays]
    return np.stack(arrays)


def _stored_groups(stage: str, indices: list[int], records: list, device: torch.device):
    """(indices, Fitted or None, reason) of stored fits (issue 35): the networks whose fit
    raised keep its reason; the others share one map rebuilt from their parameters
    (:func:`calibench.recalibration.stage_transform`), their summaries and failures as stored."""
    kept = [(i, r) for i, r in zip(indices, records) if r.params is not None]
    for i, r in zip(indices, records):
        if r.params is None:
            yield [i], None, r.failure
    if not kept:
        return
    params = {name: torch.from_numpy(_padded_stack([r.params[name] for _, r in kept])).to(device)
              for name in STAGE_PARAMS[stage]}
    info = {name: np.array([r.info.get(name, np.nan) for _, r in kept]) for name in kept[0][1].info}
    yield ([i for i, _ in kept], Fitted(method=stage, transform=stage_transform(stage, params), info=info,
                                         failures=[r.failure for _, r in kept], params=params), None)


def _new_fits(fitted: Fitted | None, reason: str | None, count: int) -> list[tuple]:
    """Each network of a fresh fit as the fit store keeps it: (params, info, failure); the
    parameters copied to the host once per fit, not per network."""
    if fitted is None:
        return [(None, {}, reason)] * count
    host = {name: v.detach().to("cpu", torch.float64).numpy() for name, v in fitted.params.items()}
    return [({name: v[j] for name, v in host.items()}, {name: float(v[j]) for name, v in fitted.info.items()},
             fitted.failures[j]) for j in range(count)]


def _stage_outputs(stage, z, y, val_idx, test_idx, options, bins, tace_threshold, chunk_elements, ood_logits,
                   stored=None, binned_only=False, mce=MCE_GAPS[0]):
    """Metrics (test part), fitted-parameter summaries, failures and reliability-diagram bins
    (:mod:`calibench.metrics.reliability`) of one stage for M networks, and the fits made
    (network -> (params, info, failure)). ``stored``: per network a stored fit of this stage
    (:class:`calibench.store.fits.StageFit`, its key checked) or None. The stage is re-applied
    for every network or fitted for every network: a batched fit's last bits can depend on its
    batch, so a refit takes the whole batch, as the fits being replaced were made.
    ``binned_only``: the binned metrics at ``bins`` only (no unbinned metric, OoD AUROC,
    reliability bins or fit summaries), from stored fits: what a re-measurement of new bin
    counts adds to a kept shard."""
    m = z.shape[0]
    names = None
    rel = {key: np.full((m, RELIABILITY_BINS), np.nan) for key in ("count", "confidence", "accuracy")}
    metrics: dict[str, np.ndarray] = {}
    info: dict[str, np.ndarray] = {}
    failures: list[str | None] = [None] * m
    made: dict[int, tuple] = {}
    if stage == "pre":
        groups = [(list(range(m)), None, None)]
    else:
        stored = list(stored) if stored is not None else [None] * m
        if any(r is None for r in stored):
            stored = [None] * m
        reuse = [i for i in range(m) if stored[i] is not None]
        todo = [i for i in range(m) if stored[i] is None]
        groups = list(_stored_groups(stage, reuse, [stored[i] for i in reuse], z.device)) if reuse else []
        if todo:
            z_val = z[:, val_idx] if len(todo) == m else z[torch.tensor(todo, device=z.device)][:, val_idx]
            for local, fitted, reason in _fit_isolated(stage, z_val, y[val_idx], options):
                indices = [todo[j] for j in local]
                groups.append((indices, fitted, reason))
                made.update(zip(indices, _new_fits(fitted, reason, len(indices))))
    for indices, fitted, reason in groups:
        idx = torch.tensor(list(indices), device=z.device)
        if fitted is None and stage != "pre":
            for i in indices:
                failures[i] = reason
            continue
        transform = (lambda t: t) if stage == "pre" else fitted.logits
        with torch.inference_mode():
            recalibrated = transform((z if len(indices) == m else z[idx])[:, test_idx])
        # a NaN or +inf anywhere in a network's logits, or a row of -inf, makes a row's max non-finite
        finite = torch.isfinite(recalibrated.amax(-1)).all(-1)
        values = measure_validated(recalibrated, y[test_idx], bins, tace_threshold, chunk_elements,
                                   unbinned=not binned_only, mce=mce)
        if not binned_only:
            for key, v in reliability_from_logits(recalibrated, y[test_idx]).items():
                rel[key][list(indices)] = v
        for name, ood in ({} if binned_only else ood_logits or {}).items():
            with torch.inference_mode():
                id_scores = torch.softmax(transform(z[idx]), -1).amax(-1)
                ood_scores = torch.softmax(transform(ood[idx].to(torch.float64)), -1).amax(-1)
            values[f"ood_auroc_{name}"] = auroc(id_scores, ood_scores).cpu().numpy()
        if names is None:
            names = list(values)
            metrics = {n: np.full(m, np.nan) for n in names}
        for n in names:
            metrics[n][list(indices)] = values[n]
        if fitted is not None:
            for key, v in fitted.info.items():
                info.setdefault(key, np.full(m, np.nan))[list(indices)] = v
            for j, i in enumerate(indices):
                failures[i] = fitted.failures[j]
        for j, i in enumerate(indices):
            if failures[i] is None and not bool(finite[j]):
                failures[i] = f"{stage}: the recalibrated probabilities are not finite"
    if names is None:  # every network failed: NaN metrics of the suite's names
        names = list(measure_validated(z[:1, test_idx], y[test_idx], bins, tace_threshold, chunk_elements,
                                       unbinned=not binned_only))
        names += [f"ood_auroc_{name}" for name in ({} if binned_only else ood_logits or {})]
        metrics = {n: np.full(m, np.nan) for n in names}
    for i, why in enumerate(failures):
        if why is not None:
            for n in names:
                metrics[n][i] = np.nan
            for v in rel.values():
                v[i] = np.nan
    if binned_only:
        return metrics, failures, rel, made
    flag = underdetermined(stage, y[val_idx], z.shape[-1])
    if flag is not None:  # a property of the validation part: recorded even where the fit failed
        info["underdetermined"] = np.full(m, float(flag))
    metrics.update({f"fit_{key}": v for key, v in info.items()})
    searched = ((options or {}).get(stage) or {}).get(SEARCH_FLAG)
    if searched is not None:  # the population's lambda, mu search: recorded even where the fit failed
        metrics[SEARCH_FLAG] = np.full(m, float(searched))
    return metrics, failures, rel, made


def measure_stages_batch(
    logits,
    labels,
    bins=DEFAULT_BINS,
    val_fraction: float = 0.2,
    seed: int = 42,
    method: str = "nll",
    tace_threshold: float = DEFAULT_TACE_THRESHOLD,
    chunk_elements: int | None = None,
    stages: Sequence[str] = ("pre", "post"),
    recalibration: Mapping | None = None,
    ood_logits: Mapping[str, torch.Tensor] | None = None,
    stored_fits: Mapping[str, Sequence] | None = None,
    new_bins: Mapping[str, Sequence[int]] | None = None,
    pre_samples: str = PRE_SAMPLES[0],
    mce: str = MCE_GAPS[0],
) -> dict:
    """Every stage's metrics for M networks on a shared evaluation set.

    Returns ``{"accuracy_full": (M,), stage: {name: (M,)} for each stage, "failures":
    {stage: [None or reason] * M}, "reliability": {stage: {"count", "confidence",
    "accuracy": (M, 15)}}}`` and, with ``post``, ``"temperature": (M,)``. A stage's
    names are the metric suite's (measured on the test part; ``ood_auroc_{set}`` for each
    of ``ood_logits``, OoD sets (M, Q, K) through the same fitted map) and ``fit_{name}``
    for the fitted parameters (``fit_temperature``, ``fit_w_norm``, ``fit_converged``,
    ``fit_underdetermined``, ...). ``recalibration``:
    the methods' options (:func:`calibench.recalibration.fit_stage`); ``method``: the
    temperature fit. ``stored_fits``: per stage, per network a stored fit to re-apply instead of
    fitting (its key checked by the caller; :mod:`calibench.store.fits`) or None; the fits made
    are returned under ``"fits"``: {stage: {network: (params, info, failure)}}. ``new_bins``:
    per stage whose other metrics are kept from an earlier measurement, the bin counts to add:
    that stage gives its binned metrics at those counts only (none: the stage is not measured),
    from its stored fits. ``pre_samples``: ``"all"`` measures ``pre`` on the whole evaluation
    set, as Tao et al.'s code did (docs/recalibration.md, "Common rules"); by default it is
    measured on the test part, as every other stage is. ``mce``: ``signed`` measures every
    stage's MCE as Tao et al. did (docs/metrics.md, "Equal-width bins").
    """
    z, y = check_logits(logits, labels, batched=True)
    bins = check_bins(bins)
    if pre_samples not in PRE_SAMPLES:
        raise ValueError(f"pre_samples: {pre_samples!r}; expected 'test_part' or 'all'")
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"stages: unknown {unknown}; expected some of {STAGES}")
    options = dict(recalibration or {})
    options.setdefault("temperature", {"method": method})
    val_idx, test_idx = split_indices(z.shape[1], val_fraction, seed)
    val_idx = torch.from_numpy(val_idx).to(z.device)
    test_idx = torch.from_numpy(test_idx).to(z.device)
    with torch.inference_mode():
        accuracy_full = (torch.argmax(z, dim=-1) == y).to(z.dtype).mean(dim=-1)  # argmax of logits = of softmax
    out: dict = {"accuracy_full": accuracy_full.cpu().numpy(), "failures": {}, "reliability": {}, "fits": {}}
    new_bins = dict(new_bins or {})
    for stage in stages:
        added = new_bins.get(stage)
        if added is not None and not added:
            continue
        on = torch.arange(z.shape[1], device=z.device) if stage == "pre" and pre_samples == "all" else test_idx
        metrics, failures, rel, made = _stage_outputs(
            stage, z, y, val_idx, on, options, bins if added is None else check_bins(added), tace_threshold,
            chunk_elements, ood_logits, (stored_fits or {}).get(stage), binned_only=added is not None, mce=mce)
        out["fits"][stage] = made
        out[stage] = metrics
        out["failures"][stage] = failures
        out["reliability"][stage] = rel
    if "post" in out and "fit_temperature" in out["post"]:
        out["temperature"] = out["post"]["fit_temperature"]
    return out


def measure_stages(logits, labels, bins=DEFAULT_BINS, val_fraction: float = 0.2, seed: int = 42, method: str = "nll",
                   tace_threshold: float = DEFAULT_TACE_THRESHOLD, stages: Sequence[str] = ("pre", "post"),
                   recalibration: Mapping | None = None) -> dict:
    """:func:`measure_stages_batch` for one network (N, K): floats instead of arrays."""
    z, y = check_logits(logits, labels)
    out = measure_stages_batch(z[None], y, bins, val_fraction, seed, method, tace_threshold, stages=stages,
                               recalibration=recalibration)
    single = {"accuracy_full": float(out["accuracy_full"][0]),
              "failures": {s: f[0] for s, f in out["failures"].items()}}
    if "temperature" in out:
        single["temperature"] = float(out["temperature"][0])
    single.update({s: {k: float(v[0]) for k, v in out[s].items()} for s in stages})
    single["reliability"] = {s: {k: v[0] for k, v in rel.items()} for s, rel in out["reliability"].items()}
    return single
