"""With ``seeds:`` a list, a table holds one row per network and seed; every statistic of the
analysis counts networks, each by its first seed, as the Kendall matrices do (docs/config.md,
``seeds``). Small synthetic tables, no workflow run."""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibench.analysis.hcs import hcs_table, top_networks
from calibench.analysis.methods import method_wins, methods_summary, summary_metrics
from calibench.analysis.nats.architecture import edge_op_frequency, size_brackets
from calibench.analysis.nats.architecture_figures import kernel_parameter_table, width_progression_table

OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")


def _tss(i: int) -> str:
    ops = [OPS[(i // 5 ** k) % 5] for k in range(6)]
    return f"|{ops[0]}~0|+|{ops[1]}~0|{ops[2]}~1|+|{ops[3]}~0|{ops[4]}~1|{ops[5]}~2|"


def _sss(i: int) -> str:
    """The 8 uniform widths first (Fig. 9), then mixed ones."""
    return ":".join(str(8 * (1 + (i if i < 8 else i + k) % 8)) for k in range(5))


def _table(space: str, n: int, seeds=(777, 888)) -> pd.DataFrame:
    """``n`` networks with every seed of ``seeds``; the second seed is far better calibrated and
    more accurate than the first, so that any statistic over seed rows differs from the
    first seed's."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        for j, seed in enumerate(seeds):
            acc = rng.uniform(0.3, 0.6) + 0.35 * j
            row = {"space": space, "hp": "200", "dataset": "cifar10", "arch_index": i, "measured_by": i, "seed": seed,
                   "arch_str": _tss(i) if space == "tss" else _sss(i), "nats_index": i, "params": 1.0, "flops": 1.0,
                   "accuracy": acc}
            for s, shift in (("pre", 0.0), ("post", -0.01), ("ts", -0.01)):
                for m in summary_metrics([15]) + ["ece_15"]:
                    row[f"{s}_{m}"] = acc if m == "accuracy" else rng.uniform(0.05, 0.2) / (1 + 9 * j) + shift
            rows.append(row)
    return pd.DataFrame(rows)


def test_every_part_counts_networks_not_seed_rows():
    tss, sss = _table("tss", 40), _table("sss", 40)
    first = pd.concat([tss, sss])
    first = first[first["seed"] == 777]
    both = pd.concat([tss, sss])

    ranked = hcs_table(both, [1.0])
    assert len(ranked) == 80 and set(ranked["seed"]) == {777}
    top = top_networks(ranked, [1.0], 10)
    assert not top.duplicated(["space", "dataset", "arch_index"]).any() and len(top) == 20
    assert top.equals(top_networks(hcs_table(first, [1.0]), [1.0], 10))

    edges = edge_op_frequency(ranked, 10, 1.0)
    assert edges.groupby("edge")["count"].sum().eq(10).all() and set(edges["networks"]) == {40}

    brackets = size_brackets(both)
    assert brackets["networks"].sum() == 40
    pd.testing.assert_frame_equal(brackets, size_brackets(first))

    kernels = kernel_parameter_table(both, [15])
    assert kernels[kernels["stage"] == "pre"]["n"].sum() == 40
    pd.testing.assert_frame_equal(kernels, kernel_parameter_table(first, [15]))

    summary = methods_summary(both, [15])
    assert set(summary["n"]) == {40}
    pd.testing.assert_frame_equal(summary, methods_summary(first, [15]))
    wins = method_wins(both, [15])
    assert set(wins["n_networks"]) == {40}
    pd.testing.assert_frame_equal(wins, method_wins(first, [15]))


def test_the_width_progression_averages_a_networks_seeds():
    both = _table("sss", 16)
    widths = width_progression_table(both, ["pre"], [15])
    uniform = both[both["arch_str"].map(lambda a: len(set(a.split(":"))) == 1)]
    assert len(widths) and set(widths["n"]) == {2}
    want = uniform.groupby("arch_index")["pre_ece_15"].mean()
    assert np.allclose(widths.set_index("arch_index")["pre_ece_15"], want.loc[widths["arch_index"]])
