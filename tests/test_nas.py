"""Architecture search over a result table (calibench.analysis.nats.nas; Tao et al. 2024 App. F, Table 1)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from calibench.analysis.nats import nas
from calibench.metrics.scores import hcs
from calibench.sources.nats.archstr import SSS_CHANNEL_CHOICES, TSS_OPS, parse_sss, tss_edge_ops


def tss_string(ops) -> str:
    o = list(ops)
    return f"|{o[0]}~0|+|{o[1]}~0|{o[2]}~1|+|{o[3]}~0|{o[4]}~1|{o[5]}~2|"


ALL_TSS = [tss_string(ops) for ops in itertools.product(TSS_OPS, repeat=6)]


def table(strings, rng, space, **extra) -> pd.DataFrame:
    n = len(strings)
    df = pd.DataFrame({"space": space, "hp": "200", "dataset": "cifar10", "arch_index": np.arange(n),
                       "arch_str": strings, "accuracy": rng.uniform(0.5, 0.95, n),
                       "pre_ece_15": rng.uniform(0.005, 0.25, n), "pre_mmce": rng.uniform(0, 0.1, n)})
    for k, v in extra.items():
        df[k] = v
    return df


@pytest.fixture(scope="module")
def sparse50():
    """50 TSS architectures drawn from all 15,625: almost none are neighbours of another."""
    rng = np.random.default_rng(7)
    pick = rng.choice(len(ALL_TSS), 50, replace=False)
    return table([ALL_TSS[i] for i in pick], rng, "tss")


@pytest.fixture(scope="module")
def dense50():
    """50 SSS architectures differing only in the last two layers: many neighbours inside the table."""
    rng = np.random.default_rng(8)
    strings = [f"16:32:64:{a}:{b}" for a, b in itertools.product(SSS_CHANNEL_CHOICES, repeat=2)][:50]
    return table(strings, rng, "sss")


@pytest.fixture(scope="module")
def conv_landscape():
    """Every TSS architecture; objective = number of convolutions (smooth, unimodal), plus noise < 1."""
    rng = np.random.default_rng(9)
    convs = np.array([sum(op.startswith("nor_conv") for op in tss_edge_ops(s)) for s in ALL_TSS])
    return table(ALL_TSS, rng, "tss", convs=convs + rng.uniform(0, 0.01, len(ALL_TSS)), n_conv=convs,
                 six=(convs == 6).astype(float))


# ---------------------------------------------------------------- neighbours

def test_tss_neighbours_differ_in_exactly_one_edge():
    rng = np.random.default_rng(1)
    for s in rng.choice(ALL_TSS, 30):
        nb = nas.neighbours(s)
        assert len(nb) == len(set(nb)) == 6 * 4
        ops = tss_edge_ops(s)
        for t in nb:
            assert sum(a != b for a, b in zip(ops, tss_edge_ops(t))) == 1
        assert s not in nb


def test_sss_neighbours_differ_in_exactly_one_layer():
    rng = np.random.default_rng(2)
    for _ in range(30):
        s = ":".join(str(c) for c in rng.choice(SSS_CHANNEL_CHOICES, 5))
        nb = nas.neighbours(s)
        assert len(nb) == len(set(nb)) == 5 * 7
        for t in nb:
            assert sum(a != b for a, b in zip(parse_sss(s), parse_sss(t))) == 1
    # every one-layer change is there
    assert set(nas.neighbours("8:8:8:8:8")) == {":".join(["8"] * i + [str(c)] + ["8"] * (4 - i))
                                                  for i in range(5) for c in SSS_CHANNEL_CHOICES[1:]}


def test_malformed_architecture_raises():
    with pytest.raises(ValueError, match="bad edge"):
        nas.neighbours("|conv~0|+|none~0|none~1|+|none~0|none~1|none~2|")
    with pytest.raises(ValueError, match="channel"):
        nas.neighbours("8:16:32", space="sss")


# ---------------------------------------------------------------- exhaustive budgets find the optimum

@pytest.mark.parametrize("fixture", ["sparse50", "dense50"])
@pytest.mark.parametrize("objective", ["accuracy", "hcs_1", "hcs_3", "pre_ece_15"])
def test_budget_covering_the_table_finds_the_global_optimum(request, fixture, objective):
    df = request.getfixturevalue(fixture)
    values = hcs(df["accuracy"], df["pre_ece_15"], float(objective[4:])) if objective.startswith("hcs") \
        else df[objective].to_numpy()
    best = values.argmin() if objective == "pre_ece_15" else values.argmax()  # ECE is minimised
    # the searchers themselves (collapse=False): every run of every algorithm queries all 50
    out = nas.nas_table(df, [objective], budget=60, repeats=5, seed=3, collapse=False)
    assert len(out) == len(nas.ALGORITHMS) and not out["exhaustive"].any()
    assert (out["hit_rate"] == 1.0).all()
    assert (out["queries_mean"] == 50).all()  # absent architectures cost nothing; the run stops at 50
    assert (out["top_arch"] == df["arch_str"].iloc[best]).all()
    assert (out["top_arch_share"] == 1.0).all()
    assert np.allclose(out[f"{objective}_mean"], values[best]) and np.allclose(out[f"{objective}_sd"], 0)
    # Table 1 as the report gets it: one exhaustive row, the optimum, the same numbers
    ex = nas.nas_table(df, [objective], budget=60, repeats=5, seed=3)
    assert ex[["algorithm", "exhaustive", "architectures", "queries_mean"]].values.tolist() == [["exhaustive", True, 50, 50]]
    assert ex["top_arch"].iloc[0] == df["arch_str"].iloc[best] and ex["top_arch_index"].iloc[0] == best
    assert ex[f"{objective}_mean"].iloc[0] == values[best] and np.isnan(ex[f"{objective}_sd"].iloc[0])
    for algorithm in nas.ALGORITHMS:
        r = nas.search(df, objective, algorithm, budget=50, seed=11)
        assert (r.arch_str, r.arch_index, r.queries) == (df["arch_str"].iloc[best], best, 50)
        assert r.value == pytest.approx(values[best])


def test_a_smaller_budget_usually_misses_the_optimum(sparse50):
    out = nas.nas_table(sparse50, ["accuracy"], budget=10, repeats=1000)
    assert (out["queries_mean"] == 10).all()
    # 10 of 50 architectures without neighbours in the table: every algorithm samples at random,
    # P(hit) = 1/5 (sd of the rate over 1000 runs: 0.013)
    assert out["hit_rate"].between(0.16, 0.24).all(), out["hit_rate"]


def test_budget_one_gives_the_table_mean(sparse50):
    repeats = 3000
    out = nas.nas_table(sparse50, ["accuracy", "hcs_2"], budget=1, repeats=repeats, seed=100).set_index(
        ["algorithm", "objective"])
    for metric in ("accuracy", "pre_ece_15", "hcs_2"):
        values = hcs(sparse50["accuracy"], sparse50["pre_ece_15"], 2) if metric == "hcs_2" else sparse50[metric]
        tol = 4 * np.std(values) / np.sqrt(repeats)
        # one query is one random architecture, whatever the algorithm and the objective
        for key in itertools.product(nas.ALGORITHMS, ("accuracy", "hcs_2")):
            assert abs(out.loc[key, f"{metric}_mean"] - np.mean(values)) < tol, (key, metric)
            assert out.loc[key, f"{metric}_sd"] == pytest.approx(np.std(values), rel=0.1)


# ---------------------------------------------------------------- the searchers do search

def test_evolution_beats_random_with_a_small_budget_on_a_smooth_landscape(conv_landscape):
    # Random search: 5.0 convolutions on average at budget 40, 6 in 1 - (1 - 64/15625)^40 = 15% of runs.
    out = nas.nas_table(conv_landscape, ["convs"], ["evolution", "random"], budget=40, repeats=100, population=10,
                        sample=3, metrics=("n_conv", "six")).set_index("algorithm")
    assert out.loc["evolution", "n_conv_mean"] > out.loc["random", "n_conv_mean"] + 0.25, out["n_conv_mean"]
    assert out.loc["evolution", "six_mean"] > out.loc["random", "six_mean"] + 0.15, out["six_mean"]


def test_local_search_beats_random_at_the_protocol_budget(conv_landscape):
    # A neighbourhood costs 24 queries: local search needs a budget of a few of them.
    out = nas.nas_table(conv_landscape, ["convs"], ["local", "random"], budget=100, repeats=50,
                        metrics=("n_conv", "six")).set_index("algorithm")
    assert out.loc["local", "n_conv_mean"] > out.loc["random", "n_conv_mean"] + 0.4, out["n_conv_mean"]
    assert out.loc["local", "six_mean"] > 0.8 > out.loc["random", "six_mean"]


def test_local_search_climbs_to_the_top_of_a_unimodal_landscape(conv_landscape):
    # From any start, each best-neighbour step adds one convolution: <= 1 + 6 * 24 queries to 6 convs.
    out = nas.nas_table(conv_landscape, ["convs"], ["local"], budget=150, repeats=20, metrics=("n_conv",))
    assert out["n_conv_mean"].iloc[0] == 6 and out["n_conv_sd"].iloc[0] == 0


def test_minimised_objective_and_direction_override(conv_landscape):
    low = nas.nas_table(conv_landscape, ["convs"], ["local"], budget=150, repeats=5, metrics=("n_conv",),
                        maximize={"convs": False})
    assert low["n_conv_mean"].iloc[0] == 0 and not low["maximize"].iloc[0]
    r = nas.search(conv_landscape, "convs", "local", budget=150, seed=0, maximize=False)
    assert r.value < 0.01


def test_evolution_leaves_a_closed_component_of_the_table():
    # Two groups of SSS architectures, neighbours within a group only: a population inside one
    # group mutates into it forever; the stall rule brings in the rest (an alarm ends a hang).
    import signal

    strings = [f"8:8:8:{a}:{b}" for a, b in itertools.product(SSS_CHANNEL_CHOICES, repeat=2)]
    strings += [f"64:64:64:64:{b}" for b in SSS_CHANNEL_CHOICES[:3]]
    df = table(strings, np.random.default_rng(5), "sss")
    df.loc[len(df) - 1, "accuracy"] = 0.99  # the optimum sits in the small group

    def hang(*_):
        raise TimeoutError("evolution did not finish")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(20)
    try:
        out = nas.nas_table(df, ["accuracy"], ["evolution"], budget=len(df), repeats=20, population=3, sample=2,
                            collapse=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert out["hit_rate"].iloc[0] == 1 and out["queries_mean"].iloc[0] == len(df)


def test_budget_counts_distinct_queries_and_absent_architectures_are_free(conv_landscape):
    # Keep 3,000 of the 15,625: most mutations leave the table and must be redrawn for free.
    rng = np.random.default_rng(4)
    part = conv_landscape.iloc[np.sort(rng.choice(len(conv_landscape), 3000, replace=False))]
    for budget in (1, 7, 100):
        out = nas.nas_table(part, ["accuracy"], budget=budget, repeats=10)
        assert (out["queries_mean"] == budget).all()


# ---------------------------------------------------------------- determinism, rows, output

def test_results_are_deterministic_under_a_seed(dense50, conv_landscape):
    for df in (dense50, conv_landscape):
        a = nas.nas_table(df, budget=30, repeats=8, seed=5)
        b = nas.nas_table(df, budget=30, repeats=8, seed=5)
        pd.testing.assert_frame_equal(a, b)
        c = nas.nas_table(df, budget=30, repeats=8, seed=6)
        assert not a["accuracy_mean"].equals(c["accuracy_mean"])
    # repeat r of base seed s is the run seeded s + r
    for algorithm, s in itertools.product(nas.ALGORITHMS, (0, 3)):
        one = nas.nas_table(conv_landscape, ["hcs_1"], [algorithm], budget=30, repeats=1, seed=s)
        run = nas.search(conv_landscape, "hcs_1", algorithm, budget=30, seed=s)
        assert (one["top_arch"].iloc[0], one["hcs_1_mean"].iloc[0]) == (run.arch_str, pytest.approx(run.value))
    runs = [nas.search(conv_landscape, "hcs_1", "evolution", budget=30, seed=s) for s in range(2, 8)]
    assert len({r.arch_str for r in runs}) > 1
    six = nas.nas_table(conv_landscape, ["hcs_1"], ["evolution"], budget=30, repeats=6, seed=2)
    values = [r.value for r in runs]
    assert six["hcs_1_mean"].iloc[0] == pytest.approx(np.mean(values))
    assert six["hcs_1_sd"].iloc[0] == pytest.approx(np.std(values, ddof=1))


def test_rows_of_several_seeds_are_averaged_and_nan_rows_left_out(dense50):
    df = dense50.copy()
    twin = df.copy()
    twin["accuracy"] = df["accuracy"] + 0.02
    twin.loc[0, "accuracy"] = np.nan  # a failed seed: the other seed's value stands
    want = df["accuracy"].to_numpy() + 0.01
    want[0] = df["accuracy"].iloc[0]
    both = pd.concat([df, twin], ignore_index=True).sample(frac=1, random_state=0)  # rows in any order,
    last = both["arch_index"] == want.argmax()  # the best architecture's two rows last
    both = pd.concat([both[~last], both[last]])
    out = nas.nas_table(both, ["accuracy"], ["random"], budget=50, repeats=2, collapse=False)
    assert out["accuracy_mean"].iloc[0] == pytest.approx(want.max())
    assert (out["top_arch"].iloc[0], out["top_arch_index"].iloc[0]) == (df["arch_str"].iloc[want.argmax()],
                                                                        want.argmax())
    assert out["architectures"].iloc[0] == 50
    gone = df.copy()
    gone.loc[gone["accuracy"].idxmax(), "accuracy"] = np.nan
    out = nas.nas_table(gone, ["accuracy"], budget=50, repeats=2)
    assert (out["architectures"] == 49).all()
    assert np.allclose(out["accuracy_mean"], gone["accuracy"].max())


def test_table_shape_and_metric_columns(dense50):
    out = nas.nas_table(dense50, budget=10, repeats=4)
    assert list(zip(out["algorithm"], out["objective"])) == [(a, o) for o in nas.OBJECTIVES for a in nas.ALGORITHMS]
    for m in ("accuracy", "pre_ece_15", "hcs_1", "hcs_2", "hcs_3", "pre_mmce"):
        assert f"{m}_mean" in out and f"{m}_sd" in out
    assert "pre_ksce_mean" not in out  # the table lacks it: skipped
    assert ((out["hcs_1_mean"] > 0) & (out["hcs_1_mean"] < 1)).all()


def test_markdown_and_run_nas(tmp_path, dense50):
    path = tmp_path / "sss_90_cifar10.parquet"
    dense50.to_parquet(path)
    out = nas.run_nas(path, tmp_path / "nas" / "sss_90_cifar10.csv", budget=20, repeats=3)
    back = pd.read_csv(tmp_path / "nas" / "sss_90_cifar10.csv")
    assert len(back) == len(out) == 12
    assert np.allclose(back["hcs_3_mean"], out["hcs_3_mean"])
    md = (tmp_path / "nas" / "sss_90_cifar10.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 12  # header + one row per (algorithm, objective)
    assert len({line.replace("\\|", "").count("|") for line in rows}) == 1  # same column count everywhere
    r = out.iloc[0]
    assert f"{100 * r['accuracy_mean']:.2f} ± {100 * r['accuracy_sd']:.2f}" in rows[1]
    tss = nas.nas_markdown(nas.nas_table(table(ALL_TSS[:40], np.random.default_rng(0), "tss"), budget=5, repeats=2))
    assert "`\\|" in tss  # pipes of TSS strings escaped inside the table


# ---------------------------------------------------------------- bad inputs

def test_bad_inputs_raise_value_errors_naming_the_problem(dense50):
    with pytest.raises(ValueError, match="pre_nll"):
        nas.nas_table(dense50, ["pre_nll"])
    with pytest.raises(ValueError, match="pre_ece_15"):
        nas.nas_table(dense50.drop(columns="pre_ece_15"), ["hcs_1"])
    with pytest.raises(ValueError, match="empty"):
        nas.nas_table(dense50.iloc[:0])
    with pytest.raises(ValueError, match="arch_str"):
        nas.nas_table(dense50.drop(columns="arch_str"))
    with pytest.raises(ValueError, match="dataset"):
        nas.nas_table(pd.concat([dense50, dense50.assign(dataset="cifar100")]))
    with pytest.raises(ValueError, match="genetic"):
        nas.nas_table(dense50, algorithms=["genetic"])
    with pytest.raises(ValueError, match="budget"):
        nas.nas_table(dense50, budget=0)
    with pytest.raises(ValueError, match="accuracy"):
        nas.nas_table(dense50.assign(accuracy=np.nan), ["accuracy"])
    with pytest.raises(ValueError, match="bad edge"):
        nas.nas_table(dense50.assign(space="tss", arch_str="|x~0|+|none~0|none~1|+|none~0|none~1|none~2|"))


def test_a_budget_reaching_a_six_row_table_reports_the_optimum_once():
    """The mini benchmark's case (issue 25): budget 100 on 6 architectures. nas.csv holds one
    exhaustive row per objective with the table's best, the report says so once, and the
    finding names it; a budget below the table's size still searches (12 rows, not exhaustive)."""
    from calibench.report.findings import findings

    rng = np.random.default_rng(12)
    df = table(ALL_TSS[:6], rng, "tss")
    out = nas.nas_tables(df, {"repeats": 100, "budget": 100, "seed": 0})
    assert out["objective"].tolist() == list(nas.OBJECTIVES) and out["exhaustive"].all()
    assert (out["algorithm"] == "exhaustive").all() and (out["architectures"] == 6).all()
    for objective in nas.OBJECTIVES:
        values = hcs(df["accuracy"], df["pre_ece_15"], float(objective[4:])) if objective.startswith("hcs") \
            else df[objective].to_numpy()
        row = out[out["objective"] == objective].iloc[0]
        assert row[f"{objective}_mean"] == values.max() and row["top_arch"] == df["arch_str"].iloc[values.argmax()]
        assert row["accuracy_mean"] == df["accuracy"].iloc[values.argmax()]
    page = nas.nas_tables_html(out)
    assert page.count("Exhaustive") == 1 and "reaches all 6 architectures" in page and "Mean ± sd" not in page
    assert page.count("(optimum)") == 4
    found = findings(df, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), [15], min_networks=30,
                     nas=out)
    text = found.loc[found["question"] == "nas", "text"].tolist()
    assert len(text) == 1 and text[0].startswith("exhaustive search (the budget 100 reaches all 6 architectures)")
    best = out.set_index("objective")
    assert found.loc[found["question"] == "nas", "value"].iloc[0] == pytest.approx(
        best.loc["hcs_1", "accuracy_mean"] - best.loc["accuracy", "accuracy_mean"], abs=1e-15)
    searched = nas.nas_tables(df, {"repeats": 3, "budget": 5})
    assert len(searched) == 12 and not searched["exhaustive"].any()
    assert "Exhaustive" not in nas.nas_tables_html(searched)


def test_a_population_beyond_nats_bench_is_named_not_guessed_and_the_cli_skips_it(tmp_path, dense50, capsys):
    """A population table (space "zoo", model names as arch_str) has no search space: NAS says so
    (it guessed SSS from the name and failed to parse it); `calibench nas` over a run's tables
    searches the NATS-Bench ones and names the tables it skipped."""
    from calibench import layout
    from calibench.run.cli import main

    zoo = dense50.assign(space="zoo", hp="", arch_str=[f"m{i}" for i in range(len(dense50))])
    with pytest.raises(ValueError, match="space 'zoo' is not a NATS-Bench space"):
        nas.nas_table(zoo)
    results = tmp_path / "results"
    for frame, target in ((dense50, "sss_90"), (zoo, "zoo")):
        path = layout.table_path(results, target, "cifar10")
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(path)
    assert main(["nas", "--results", str(results), "--budget", "5", "--repeats", "2", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr()
    assert "skipped (not a NATS-Bench space, or no rows): zoo_cifar10" in out.err
    assert (tmp_path / "o" / "nas_sss_90_cifar10.csv").is_file() and not (tmp_path / "o" / "nas_zoo_cifar10.csv").exists()
    code = main(["nas", str(layout.table_path(results, "zoo", "cifar10")), "--out", str(tmp_path / "o2")])
    assert code == 2 and "not a NATS-Bench space" in capsys.readouterr().err


def test_an_objective_one_of_several_tables_lacks_writes_nothing(tmp_path, dense50, capsys):
    """`calibench nas` over two tables whose second lacks an objective: exit 2 naming that table,
    and no result written for the first either (it wrote the first's and then stopped)."""
    from calibench import layout
    from calibench.run.cli import main

    paths = []
    for frame, dataset in ((dense50.assign(pre_ood_auroc_svhn=0.5), "cifar10"), (dense50, "cifar100")):
        path = layout.table_path(tmp_path / "results", "sss_90", dataset)
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.assign(dataset=dataset).to_parquet(path)
        paths.append(str(path))
    out = tmp_path / "o"
    assert main(["nas", *paths, "--objectives", "pre_ood_auroc_svhn", "--budget", "5", "--repeats", "1",
                 "--out", str(out)]) == 2
    assert "sss_90_cifar100.parquet" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
