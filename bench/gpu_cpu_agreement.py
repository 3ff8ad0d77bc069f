"""CPU against CUDA, stage by stage, on test_measure_device's synthetic population (N = 300,
K = 10, five networks of growing logit scale): where do the measurement job's shard values
differ by more than 1e-6, by how much, and is it the fit, the transform or the metric suite?

    PYTHONPATH=src:tests python bench/gpu_cpu_agreement.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_measure_device as t  # noqa: E402

from calibench.metrics import binned  # noqa: E402
from calibench.metrics.ks import ks_from_sorted  # noqa: E402
from calibench.metrics.suite import measure_validated  # noqa: E402
from calibench.recalibration.nonparametric import fit_isotonic  # noqa: E402
from calibench.recalibration.spline import fit_spline  # noqa: E402


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    cpu, _ = t._measure(tmp, {"device": "cpu", "measure_group": "auto"}, "cpu")
    gpu, _ = t._measure(tmp, {"device": "cuda", "measure_group": "auto"}, "cuda")
    print("shard rows differing by more than 1e-6 (relative to max(1, |value|)):")
    for i in range(t.M):
        a, _ = t._shard(cpu, i)
        b, _ = t._shard(gpu, i)
        m = a.merge(b, on=["stage", "metric", "bins"], suffixes=("_cpu", "_gpu"))
        d = (m["value_cpu"] - m["value_gpu"]).abs() / m["value_cpu"].abs().clip(lower=1.0)
        bad = m[d > 1e-6]
        for _, r in bad.iterrows():
            print(f"  network {i} {r['stage']:7s} {r['metric']:20s} bins={r['bins']}: cpu {r['value_cpu']:.10g} "
                  f"gpu {r['value_gpu']:.10g} (diff {abs(r['value_cpu'] - r['value_gpu']):.2e})")
    rng = np.random.default_rng(7)
    labels = rng.integers(0, t.K, t.N)
    zs = [rng.normal(0, 1 + i, size=(t.N, t.K)) + 3 * np.eye(t.K)[labels] * rng.uniform(0.5, 1.5) for i in range(t.M)]
    z = torch.from_numpy(np.stack(zs).astype(np.float32)).double()
    y = torch.from_numpy(labels)
    h = t.N // 2
    for name, fit in (("spline", fit_spline), ("iso", fit_isotonic)):
        fc = fit(z[:, :h], y[:h])
        fg = fit(z[:, :h].cuda(), y[:h].cuda())
        for key in fc.params:
            pc, pg = fc.params[key], fg.params[key].cpu()
            same_shape = pc.shape == pg.shape
            gap = (pc.double() - pg.double()).abs().max().item() if same_shape else float("nan")
            print(f"{name} fit param {key}: shapes {tuple(pc.shape)} / {tuple(pg.shape)}, max diff {gap:.2e}")
        oc = fc.transform(z[:, h:])
        og_on_gpu = fg.transform(z[:, h:].cuda()).cpu()
        og_cpu_fit_on_gpu = fc.transform(z[:, h:].cuda()).cpu() if name == "spline" else None
        pc_, pg_ = torch.softmax(oc, -1), torch.softmax(og_on_gpu, -1)
        print(f"{name} transform: max prob diff {(pc_ - pg_).abs().max().item():.2e}"
              + (f"; CPU fit applied on CUDA: {(pc_ - torch.softmax(og_cpu_fit_on_gpu, -1)).abs().max().item():.2e}"
                 if og_cpu_fit_on_gpu is not None else ""))
        mc = measure_validated(oc, y[h:], (5, 15))
        mg_cpu_suite = measure_validated(og_on_gpu, y[h:], (5, 15))
        mg_gpu_suite = measure_validated(fg.transform(z[:, h:].cuda()), y[h:].cuda(), (5, 15))
        for label, other in (("GPU outputs, CPU suite", mg_cpu_suite), ("GPU outputs, GPU suite", mg_gpu_suite)):
            worst = {k: float(np.nanmax(np.abs(mc[k] - other[k]))) for k in mc}
            print(f"  {name} metrics, {label}: " + ", ".join(f"{k} {v:.1e}" for k, v in
                                                           sorted(worst.items(), key=lambda kv: -kv[1])[:5]))
        conf = pc_.amax(-1)
        sc = conf.sort(-1).values
        print(f"  {name}: exact ties among test confidences per network: "
              f"{[(int((s[1:] == s[:-1]).sum())) for s in sc]}, gaps < 1e-12: "
              f"{[(int(((s[1:] - s[:-1]) < 1e-12).sum())) for s in sc]}")
    # the top-label sort of the suite: unstable on CUDA; does it matter for KS?
    conf = torch.softmax(z, -1).amax(-1).cuda()
    hit = (torch.softmax(z, -1).argmax(-1) == y).double().cuda()
    k1 = ks_from_sorted(binned.sort_rows(conf, hit)).cpu()
    k2 = ks_from_sorted(binned.sort_rows(conf, hit, stable=True)).cpu()
    print(f"ksce on CUDA, unstable vs stable sort: max diff {(k1 - k2).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
