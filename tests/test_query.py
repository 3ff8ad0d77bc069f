"""calibench.results.query: the ``networks`` view's ``hcs_{beta}`` columns are
calibench.metrics.scores.hcs itself (one formula for SQL and the analysis), NULL where an
input is NULL; ``calibench top --by hcs_1`` ranks by them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibench import layout
from calibench.config.check import schema_default
from calibench.metrics.scores import hcs
from calibench.results import query
from calibench.run import cli


def write_table(results, target: str, dataset: str, rng, n: int = 40) -> pd.DataFrame:
    space, hp = layout.split_target(target)
    accuracy = rng.uniform(0.05, 0.95, n)
    ece = rng.uniform(0.0, 0.4, n)
    accuracy[3] = np.nan  # a network without an accuracy
    ece[5] = np.nan
    table = pd.DataFrame({"space": space, "hp": hp, "dataset": dataset, "arch_index": np.arange(n),
                          "measured_by": np.arange(n), "seed": 777, "arch_str": [f"a{i}" for i in range(n)],
                          "accuracy": accuracy, "pre_ece_15": ece, "post_ece_15": ece / 2, "temperature": 1.5})
    path = layout.table_path(results, target, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(path, index=False)
    return table


def test_the_hcs_columns_are_the_metrics_function(tmp_path):
    rng = np.random.default_rng(0)
    tables = pd.concat([write_table(tmp_path, "tss_200", "cifar10", rng),
                        write_table(tmp_path, "sss_90", "cifar100", rng)], ignore_index=True)
    betas = schema_default("analysis", "hcs_betas")
    con = query.connect(tmp_path)
    got = con.sql("SELECT space, dataset, arch_index, accuracy, pre_ece_15, "
                  + ", ".join(f"hcs_{b:g}" for b in betas) + " FROM networks").df()
    got = got.sort_values(["space", "arch_index"]).reset_index(drop=True)
    want = tables.sort_values(["space", "arch_index"]).reset_index(drop=True)
    for b in betas:
        expected = hcs(want["accuracy"].to_numpy(), want["pre_ece_15"].to_numpy(), b)
        np.testing.assert_array_equal(got[f"hcs_{b:g}"].to_numpy(dtype=float), expected)  # the same bits
    nulls = con.execute("SELECT count(*) FROM networks WHERE hcs_1 IS NULL").fetchall()[0][0]
    assert nulls == 4  # NULL in, NULL out (accuracy or ECE missing), as the SQL formula gave
    # other betas on request; the SQL function is usable in any query
    con = query.connect(tmp_path, betas=[0.5])
    half = con.sql('SELECT "hcs_0.5" AS h, hcs(accuracy, pre_ece_15, 0.5) AS again FROM networks '
                   'WHERE "hcs_0.5" IS NOT NULL').df()
    np.testing.assert_array_equal(half["h"], half["again"])


def test_top_by_hcs_ranks_by_the_view(tmp_path, capsys):
    rng = np.random.default_rng(1)
    table = write_table(tmp_path, "tss_200", "cifar10", rng)
    assert cli.main(["top", "--space", "tss", "--dataset", "cifar10", "--by", "hcs_1", "-n", "5",
                     "--results", str(tmp_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].split()[:2] == ["arch_index", "measured_by"] and "hcs_1" in shown[0]
    scores = pd.Series(hcs(table["accuracy"], table["pre_ece_15"], 1), index=table["arch_index"])
    best = scores.dropna().sort_values(ascending=False, kind="stable").index[:5].tolist()
    assert [int(line.split()[0]) for line in shown[1:]] == best


def test_no_tables_says_where_it_looked(tmp_path):
    with pytest.raises(ValueError, match=str(layout.tables_dir(tmp_path))):
        query.connect(tmp_path)
