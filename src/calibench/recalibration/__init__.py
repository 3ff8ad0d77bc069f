"""Post-hoc recalibration, every method of docs/recalibration.md (numeric core: arrays in,
fitted maps out; batched over networks; CPU or CUDA).

Each ``fit_*`` takes validation logits (M, N_val, K) and shared labels (N_val,) and
returns a :class:`Fitted` whose ``probs(logits)`` gives full probability vectors and whose
``info`` holds the per-network fitted parameters (:mod:`.base`).
"""

import torch

from calibench.vocabulary import ODIR_STAGES, STAGES
from calibench.recalibration.base import Fitted
from calibench.recalibration.temperature import fit_temperature, fit_temperature_batch, fit_temperature_scaling

__all__ = ["STAGES", "ODIR_STAGES", "fit_stage", "stage_transform", "STAGE_PARAMS", "Fitted", "fit_temperature",
           "fit_temperature_batch", "fit_temperature_scaling"]

# The parameters a stage's map is rebuilt from (:func:`stage_transform`): what a fit's
# ``params`` holds, less what only describes the fit (spline ``knot_values``, iso ``n_knots``).
STAGE_PARAMS = {"post": ("temperature",), "vs": ("w", "b"), "ms": ("W", "b"), "dir": ("W", "b"), "iso": ("x", "y"),
                "hist": ("bin_values",), "spline": ("x", "y")}


def stage_transform(stage: str, params):
    """The recalibration map of ``stage`` rebuilt from its fitted parameters (a fit's
    ``params``, e.g. read back from storage; arrays or tensors, first dimension M): a function
    of logits (M, N, K) to recalibrated logits (float64), the same function the fit itself
    returned, so on the same device and batch it gives the same bits."""
    if stage not in STAGE_PARAMS:
        raise ValueError(f"stage: {stage!r} has no fitted map; expected one of {sorted(STAGE_PARAMS)}")
    missing = [name for name in STAGE_PARAMS[stage] if name not in params]
    if missing:
        raise ValueError(f"{stage}: parameters {missing} missing (have {sorted(params)})")
    p = [torch.as_tensor(params[name], dtype=torch.float64) for name in STAGE_PARAMS[stage]]
    if stage == "post":
        from calibench.recalibration.temperature import temperature_transform

        return temperature_transform(*p)
    if stage in ("vs", "ms", "dir"):
        from calibench.recalibration.scaling import ms_transform, vs_transform

        return vs_transform(*p) if stage == "vs" else ms_transform(*p, dirichlet=stage == "dir")
    if stage == "iso":
        from calibench.recalibration.nonparametric import isotonic_transform

        return isotonic_transform(*p)
    if stage == "hist":
        from calibench.recalibration.nonparametric import histogram_transform

        return histogram_transform(*p)
    from calibench.recalibration.spline import spline_transform

    return spline_transform(*p)


def fit_stage(stage: str, logits_val, labels_val, options=None) -> Fitted:
    """Fit the method of ``stage`` to M networks: logits (M, N_val, K) float64, labels (N_val,).

    ``options`` (all optional): ``temperature: {method}``; ``max_iterations``, ``tolerance``
    (vs, ms, dir); ``ms`` / ``dir``: ``{lambda, mu}`` (required for those stages);
    ``hist_bins``; ``spline_knots`` (left out: the method's own default).
    """
    options = dict(options or {})
    iterations = {k: options[k] for k in ("max_iterations", "tolerance") if options.get(k) is not None}
    if stage == "post":
        method = (options.get("temperature") or {}).get("method")
        given = {"method": method} if method is not None else {}
        return fit_temperature_scaling(logits_val, labels_val, **given)
    if stage == "vs":
        from calibench.recalibration.scaling import fit_vector_scaling

        return fit_vector_scaling(logits_val, labels_val, **iterations)
    if stage in ODIR_STAGES:
        from calibench.recalibration.scaling import fit_dirichlet, fit_matrix_scaling

        odir = options.get(stage) or {}
        if odir.get("lambda") is None or odir.get("mu") is None:
            raise ValueError(f"{stage}: lambda and mu must be given (config, or the search: odir_search)")
        fit = fit_matrix_scaling if stage == "ms" else fit_dirichlet
        return fit(logits_val, labels_val, float(odir["lambda"]), float(odir["mu"]), **iterations)
    if stage == "iso":
        from calibench.recalibration.nonparametric import fit_isotonic

        return fit_isotonic(logits_val, labels_val)
    if stage == "hist":
        from calibench.recalibration.nonparametric import fit_histogram_binning

        given = {"n_bins": int(options["hist_bins"])} if options.get("hist_bins") is not None else {}
        return fit_histogram_binning(logits_val, labels_val, **given)
    if stage == "spline":
        from calibench.recalibration.spline import fit_spline

        given = {"n_knots": int(options["spline_knots"])} if options.get("spline_knots") is not None else {}
        return fit_spline(logits_val, labels_val, **given)
    raise ValueError(f"stage: {stage!r} is not a recalibration method; expected one of {STAGES[1:]}")
