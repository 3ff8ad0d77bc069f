"""Populations beyond NATS-Bench (issue 12): a directory of logits and a list of torch models go
through the same store, measurements, tables, analysis, report and queries as NATS-Bench.

The logits population has known miscalibration: one calibrated model's logits scaled by
known temperatures, so the fitted temperatures and the order of ECE are known in advance.
Bad files sit beside the good ones; each is a failure naming its file, and nothing else is
lost. The torch population is a few tiny CNNs built here, run on the mini benchmark's
CIFAR-format data, with a model that raises and one with the wrong number of classes."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from scipy.stats import kendalltau

from calibench import layout
from calibench.store import logits as store
from calibench.config import settings as stage
from calibench.measure.stages import split_indices
from calibench.metrics.functional import ece
from calibench.sources import SourceError
from calibench.sources import logits_dir, torch_models
from fixtures import copy_workflow, workflow_minibench

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
TEMPERATURES = {"t050": 0.5, "t100": 1.0, "t150": 1.5, "t250": 2.5, "t400": 4.0, "t600": 6.0}
FAMILY = {"t050": "a", "t100": "b", "t150": "a", "t250": "b", "t400": "a", "t600": "b"}
BAD = {  # model -> what its cifar10 file gets wrong (and the words its failure must hold)
    "nolabels": "no 'labels' array",
    "short": "rows of logits but",
    "nanlogits": "non-finite logits",
    "otherlabels": "labels differ from the dataset's",
    "ghost": "no such file",
    "wide": "12 logit columns, but the cifar10 models have 10 (the class count most of its files have)",
}
N = {"cifar10": 2500, "shifted": 1500}
K = 10

TINY_ZOO = '''
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self, width, classes=10, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.body(x))


class Broken(Tiny):
    def forward(self, x):
        raise RuntimeError("broken on purpose")


def build():
    return {"tiny4": Tiny(4, seed=1), "tiny8": Tiny(8, seed=2), "broken": Broken(4), "seven": Tiny(4, classes=7)}


def more():
    return [("tiny2", Tiny(2, seed=3))]


def unit(images):
    return images.float() / 255.0


def own_data():
    g = torch.Generator().manual_seed(5)
    images = torch.randint(0, 256, (50, 3, 16, 16), dtype=torch.uint8, generator=g)
    return images.numpy(), (torch.arange(50) % 10).numpy()
'''


def _calibrated(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits and labels drawn from their own softmax: calibrated by construction."""
    z = rng.normal(0.0, 2.0, size=(n, K))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = (p.cumsum(1) > rng.random((n, 1))).argmax(1)
    return z, y


def write_logits_population(root: Path) -> dict:
    """The README's npz layout: models.csv and one npz per (dataset, model); returns the base logits."""
    rng = np.random.default_rng(0)
    base = {}
    for dataset, n in N.items():
        z, y = _calibrated(rng, n)
        base[dataset] = (z, y)
        (root / dataset).mkdir(parents=True, exist_ok=True)
        noise = rng.normal(0.0, 1.0, size=(300, K))  # an OoD set for the "shifted" files of the good models
        for name, t in TEMPERATURES.items():
            ood = {"ood_noise": (noise * t).astype(np.float32)} if dataset == "shifted" else {}
            np.savez(root / dataset / f"{name}.npz", logits=(z * t).astype(np.float32), labels=y, **ood)
        for name in BAD:
            if name != "ghost":
                np.savez(root / dataset / f"{name}.npz", logits=(z * 2).astype(np.float32), labels=y)
    z, y = base["cifar10"]
    bad = root / "cifar10"
    np.savez(bad / "nolabels.npz", logits=z.astype(np.float32))
    np.savez(bad / "short.npz", logits=z.astype(np.float32), labels=y[:-1])
    nan = z.astype(np.float32).copy()
    nan[7, 3] = np.nan
    np.savez(bad / "nanlogits.npz", logits=nan, labels=y)
    np.savez(bad / "otherlabels.npz", logits=z.astype(np.float32), labels=(y + 1) % K)
    np.savez(bad / "wide.npz", logits=np.pad(z, ((0, 0), (0, 2))).astype(np.float32), labels=y)  # 12 classes of 10
    rows = ["model,family,loss,params"]
    for i, name in enumerate([*TEMPERATURES, *BAD]):
        rows.append(f"{name},{FAMILY.get(name, 'c')},{'ce' if TEMPERATURES.get(name, 9) < 2 else 'focal'},{1000 * (i + 1)}")
    (root / "models.csv").write_text("\n".join(rows) + "\n")
    return base


CONFIG = {
    "spaces": [],
    # The torch models' evaluation and OoD sets: the session's mini benchmark, copied in (its archives unused).
    "minibench": {"build": False, "dir": "resources/minibench"},
    "populations": {
        "zoo": {"source": "logits", "path": "zoo", "group_by": ["family"], "chunk_size": 6},
        "tiny": {"source": "torch", "models": ["tinyzoo:build", "tinyzoo:more"], "python_path": ["code"],
                 "datasets": ["cifar10"], "data": {"own": "tinyzoo:own_data"}, "chunk_size": 3},
        "raw": {"source": "torch", "models": "tinyzoo:more", "python_path": ["code"], "transform": "tinyzoo:unit",
                "datasets": ["cifar10"]},
    },
    "bins": [5, 15, 50],
    "stages": ["pre", "post", "vs", "iso"],
    # the parts these tests read (analysis.parts): the rest would only cost time
    "analysis": {"hcs_betas": [1], "top_k": [], "top_n": 3, "bootstrap": {"resamples": 0}, "parts": ["kendall", "groups"]},
}


def _snakemake(workdir: Path, *args, check=True):
    proc = subprocess.run(SNAKEMAKE + ["--configfile", "tiny.yaml", "--cores", "2", *args], cwd=workdir,
                          capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("populations"), CONFIG)
    shutil.copytree(workflow_minibench(tmp_path_factory), workdir / "resources" / "minibench")
    base = write_logits_population(workdir / "zoo")
    (workdir / "code").mkdir()
    (workdir / "code" / "tinyzoo.py").write_text(TINY_ZOO)
    proc = _snakemake(workdir, check=False)  # --keep-going (profile): the bad models fail, the rest finish
    assert proc.returncode == 0, proc.stderr[-5000:]
    return workdir, base


# ---------------------------------------------------------------- the logits population

def test_logits_tables_hold_the_good_models_with_their_metadata(run):
    workdir, _ = run
    for dataset in N:
        table = pd.read_parquet(workdir / f"results/tables/zoo_{dataset}.parquet")
        good = set(TEMPERATURES) if dataset == "cifar10" else set(TEMPERATURES) | set(BAD) - {"ghost"}
        assert set(table["arch_str"]) == good, dataset
        assert list(table.columns[:9]) == ["space", "hp", "dataset", "arch_index", "measured_by", "seed", "family",
                                           "loss", "arch_str"]
        assert (table["space"] == "zoo").all() and (table["hp"] == "").all()
        row = table.set_index("arch_str").loc["t250"]
        assert row["family"] == "b" and row["loss"] == "focal" and row["params"] == 4000.0


def test_each_bad_file_is_a_failure_naming_it_and_the_others_go_on(run):
    workdir, _ = run
    failures = pd.read_parquet(workdir / "results/failures/zoo_cifar10.parquet")
    names = json.loads((workdir / "results/population/zoo.json").read_text())["arch_strs"]
    by_model = {names[i]: r for i, r in zip(failures["arch_index"], failures["reason"])}
    assert set(by_model) == set(BAD)
    for name, words in BAD.items():
        assert words in by_model[name], (name, by_model[name])
        assert f"cifar10/{name}.npz" in by_model[name]
    assert pd.read_parquet(workdir / "results/failures/zoo_shifted.parquet").query("stage == 'inference'")[
        "arch_index"].map(lambda i: names[i]).tolist() == ["ghost"]


def test_fitted_temperatures_and_ece_order_are_the_known_ones(run):
    workdir, _ = run
    table = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_str")
    fitted = table.loc[list(TEMPERATURES), "temperature"]
    ratio = fitted / pd.Series(TEMPERATURES)
    # logits z * t: the fitted temperature is t times the base logits' own (the fit's tolerance)
    np.testing.assert_allclose(ratio, ratio.iloc[0], rtol=1e-4)
    assert 0.85 < ratio.iloc[0] < 1.15  # the base logits are calibrated: their own temperature is near 1
    # After temperature scaling every model has the same logits: the same ECE.
    post = table.loc[list(TEMPERATURES), "post_ece_15"]
    np.testing.assert_allclose(post, post.iloc[0], rtol=1e-6, atol=1e-9)
    pre = table.loc[list(TEMPERATURES), "pre_ece_15"]
    assert pre.idxmin() == "t100"
    over = ["t100", "t150", "t250", "t400", "t600"]  # overconfident, more so with t
    assert pre.loc[over].is_monotonic_increasing and pre.loc[over].diff().iloc[1:].gt(0.01).all()


def test_table_metrics_equal_a_direct_computation_on_the_files(run):
    workdir, base = run
    table = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_str")
    _, test_idx = split_indices(N["cifar10"], 0.2, 42)  # the config's temperature split
    for name, t in TEMPERATURES.items():
        with np.load(workdir / "zoo" / "cifar10" / f"{name}.npz") as f:
            z, y = f["logits"], f["labels"]
        probs = torch.softmax(torch.from_numpy(z).double(), dim=1).numpy()
        for b in (5, 15, 50):
            assert table.loc[name, f"pre_ece_{b}"] == pytest.approx(ece(probs[test_idx], y[test_idx], b), abs=1e-9)
        assert table.loc[name, "accuracy"] == pytest.approx((z.argmax(1) == y).mean(), abs=1e-12)
        stored = store.read_network_logits(layout.logits_path(workdir / "results", "zoo", "", "cifar10",
                                                             list(TEMPERATURES).index(name)))
        np.testing.assert_array_equal(stored.seeds[0].sets["test"], z)  # the store holds the file's logits
    shifted = pd.read_parquet(workdir / "results/tables/zoo_shifted.parquet").set_index("arch_str")
    # the good models carry an OoD set, the others none: measured in separate batches, each right
    assert shifted.loc[list(TEMPERATURES), "pre_ood_auroc_noise"].notna().all()
    assert shifted.loc[["nolabels", "short"], "pre_ood_auroc_noise"].isna().all()


def test_kendall_matrices_of_the_population_equal_scipy(run):
    workdir, _ = run
    kendall = pd.read_parquet(workdir / "results/analysis/kendall.parquet")
    k = kendall[(kendall["space"] == "zoo") & (kendall["figure"] == "datasets") & (kendall["metric"] == "pre_ece_15")
                & (kendall["population"] == "all") & (kendall["row"] == "cifar10") & (kendall["col"] == "shifted")]
    assert len(k) == 1
    a = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_index")["pre_ece_15"]
    b = pd.read_parquet(workdir / "results/tables/zoo_shifted.parquet").set_index("arch_index")["pre_ece_15"]
    both = pd.concat([a, b], axis=1, join="inner")
    assert k["n"].iloc[0] == len(both) == len(TEMPERATURES)
    assert k["tau"].iloc[0] == pytest.approx(kendalltau(both.iloc[:, 0], both.iloc[:, 1]).statistic, abs=1e-12)


def test_groups_by_metadata_and_the_report(run):
    workdir, _ = run
    groups = pd.read_csv(workdir / "results/analysis/groups.csv")
    part = groups[(groups["dataset"] == "cifar10") & (groups["stage"] == "pre")].set_index("group")
    table = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet")
    for family, rows in table.groupby("family"):
        assert part.loc[family, "n"] == len(rows)
        assert part.loc[family, "ece_median"] == pytest.approx(rows["pre_ece_15"].median(), abs=1e-12)
    report = (workdir / "results/report.html").read_text()
    assert "Populations beyond NATS-Bench" in report and "zoo, by family" in report
    assert "groups_family_zoo.png" in report
    assert "not NATS-Bench results" not in report  # no NATS space ran: no mini-benchmark label on these figures


def test_duckdb_views_carry_the_metadata(run):
    workdir, _ = run
    from calibench.results.query import connect

    con = connect(workdir / "results")
    rows = dict(con.execute("SELECT family, count(*) FROM networks WHERE space = 'zoo' AND dataset = 'cifar10' "
                            "GROUP BY family").fetchall())
    assert rows == {"a": 3, "b": 3}


def test_a_logits_store_is_a_population_too_and_a_second_import_reads_nothing(run, tmp_path):
    from calibench.sources import infer_chunk, write_labels, write_population

    workdir, _ = run
    settings = {"source": "logits", "path": str(workdir / "results"), "space": "zoo", "datasets": ["cifar10"]}
    results = tmp_path / "results"
    for space, datasets in (("zoo", ["cifar10", "shifted"]), ("tiny", ["cifar10", "own"])):
        config = {"populations": {"again": {"source": "logits", "path": str(workdir / "results"), "space": space}},
                  "chunk_size": 4}
        assert stage.population_datasets(config, "again") == datasets  # found in the store, per tree
        # the jobs' settings carry the tree they read (they dropped it: a store of two trees stopped the job)
        assert stage.population_settings(config, "again")["space"] == space
        assert stage.inference_settings(config, "again")["space"] == space and "hp" not in stage.inference_settings(
            config, "again")
    doc = write_population({**settings, "chunk_size": 4}, "again", results / "population" / "again.json")
    assert doc["layout"] == "store" and doc["arch_strs"] == list(TEMPERATURES)
    write_labels(settings, "cifar10", layout.labels_path(results, "cifar10", space="again"), space="again")
    runs = [infer_chunk({**settings, "inference_version": stage.INFERENCE_VERSION}, {}, "again", "", chunk, results,
                        tmp_path / f"manifest{chunk}.json", progress=False) for chunk in (0, 1) for _ in range(2)]
    assert [(r["computed"], r["skipped"], len(r["failures"])) for r in runs] == [(4, 0, 0), (0, 4, 0), (2, 0, 0),
                                                                                   (0, 2, 0)]
    for i in range(len(TEMPERATURES)):
        mine = store.read_network_logits(layout.logits_path(results, "again", "", "cifar10", i))
        theirs = store.read_network_logits(layout.logits_path(workdir / "results", "zoo", "", "cifar10", i))
        np.testing.assert_array_equal(mine.seeds[0].sets["test"], theirs.seeds[0].sets["test"])
        assert mine.meta["arch_str"] == theirs.meta["arch_str"] and mine.meta["space"] == "again"


# ---------------------------------------------------------------- the torch population

def _tinyzoo(workdir: Path):
    """The test's model module, imported as the workflow did (from the run's python_path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tinyzoo", workdir / "code" / "tinyzoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_logits_equal_running_the_models_directly(run):
    workdir, _ = run
    tinyzoo = _tinyzoo(workdir)
    from calibench.inference.engine import load_eval_data

    data = load_eval_data("cifar10", workdir / "resources/minibench/datasets", ood=())
    models = {**tinyzoo.build(), **dict(tinyzoo.more())}
    table = pd.read_parquet(workdir / "results/tables/tiny_cifar10.parquet").set_index("arch_str")
    assert set(table.index) == {"tiny4", "tiny8", "tiny2"}
    names = json.loads((workdir / "results/population/tiny.json").read_text())["arch_strs"]
    assert names == ["tiny4", "tiny8", "broken", "seven", "tiny2"]
    for name in table.index:
        with torch.inference_mode():
            direct = models[name].eval()(data.images).float()
        stored = store.read_network_logits(layout.logits_path(workdir / "results", "tiny", "", "cifar10",
                                                             names.index(name)))
        np.testing.assert_allclose(stored.seeds[0].sets["test"], direct.numpy(), rtol=1e-5, atol=1e-6)
        acc = (direct.argmax(1) == data.labels).double().mean().item()
        assert table.loc[name, "accuracy"] == pytest.approx(acc, abs=1e-12)
        assert table.loc[name, "params"] == sum(p.numel() for p in models[name].parameters())
        assert table.loc[name, "callable"] == ("tinyzoo:more" if name == "tiny2" else "tinyzoo:build")


def test_a_transform_replaces_the_standard_normalisation_for_the_test_and_ood_sets(run):
    workdir, _ = run
    tinyzoo = _tinyzoo(workdir)
    from calibench.inference.data import gaussian_noise, load_eval_set

    raw = load_eval_set("cifar10", workdir / "resources/minibench/datasets")
    model = dict(tinyzoo.more())["tiny2"].eval()
    stored = store.read_network_logits(layout.logits_path(workdir / "results", "raw", "", "cifar10", 0)).seeds[0]
    with torch.inference_mode():
        direct = model(torch.from_numpy(raw.images).float() / 255.0)
        noisy = model(torch.from_numpy(gaussian_noise(raw.images, severity=5, seed=0)).float() / 255.0)
    np.testing.assert_allclose(stored.sets["test"], direct.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stored.sets["ood_gaussian_noise"], noisy.numpy(), rtol=1e-5, atol=1e-6)


def test_torch_models_on_own_data_scaled_to_unit_range(run):
    workdir, _ = run
    tinyzoo = _tinyzoo(workdir)
    images, labels = tinyzoo.own_data()
    x = torch.from_numpy(images).float() / 255.0  # uint8 own data without a transform: [0, 1]
    models = {**tinyzoo.build(), **dict(tinyzoo.more())}
    table = pd.read_parquet(workdir / "results/tables/tiny_own.parquet").set_index("arch_str")
    assert set(table.index) == {"tiny4", "tiny8", "tiny2"} and (table["n_eval"] == 50).all()
    for name in table.index:
        with torch.inference_mode():
            direct = models[name].eval()(x)
        acc = (direct.argmax(1) == torch.from_numpy(labels)).double().mean().item()
        assert table.loc[name, "accuracy"] == pytest.approx(acc, abs=1e-12)
    reasons = pd.read_parquet(workdir / "results/failures/tiny_own.parquet")["reason"]
    assert sorted(r.split(":")[0] for r in reasons) == ["model 'broken' (tinyzoo", "model 'seven' (tinyzoo"]


def test_torch_failures_name_the_model_and_the_reason(run):
    workdir, _ = run
    failures = pd.read_parquet(workdir / "results/failures/tiny_cifar10.parquet")
    reasons = sorted(failures["reason"])
    assert len(reasons) == 2
    assert "model 'broken'" in reasons[0] and "broken on purpose" in reasons[0]
    assert "model 'seven'" in reasons[1] and "the output has 7 classes, cifar10 has 10" in reasons[1]


def test_a_finished_run_has_nothing_left_to_do(run):
    workdir, _ = run
    proc = _snakemake(workdir, "-n")
    assert "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-2000:]


# ---------------------------------------------------------------- bad input, one at a time

def test_npz_problems_are_errors_naming_the_file(tmp_path):
    z = np.zeros((5, 3), np.float32)
    cases = {
        "nolabels": ({"logits": z}, "no 'labels' array"),
        "short": ({"logits": z, "labels": np.zeros(4, int)}, "5 rows of logits but 4 labels"),
        "nan": ({"logits": np.where(np.eye(5, 3) > 0, np.nan, z).astype(np.float32), "labels": np.zeros(5, int)},
                "non-finite logits in 3 of 5 rows"),
        "range": ({"logits": z, "labels": np.array([0, 1, 2, 3, 0])}, "labels outside [0, 3), the classes of its 3 logit columns (labels: min 0, max 3"),
        "ood": ({"logits": z, "labels": np.zeros(5, int), "ood_noise": np.zeros((4, 2), np.float32)}, "'ood_noise'"),
        "ints": ({"logits": z.astype(int), "labels": np.zeros(5, int)}, "float32 or float64"),
    }
    for name, (arrays, words) in cases.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **arrays)
        with pytest.raises(SourceError, match=re.escape(words)) as err:
            logits_dir.read_npz(path)
        assert str(path) in str(err.value)
    with pytest.raises(SourceError, match="no such file"):
        logits_dir.read_npz(tmp_path / "absent.npz")
    ok = tmp_path / "ok.npz"
    np.savez(ok, logits=z.astype(np.float64), labels=np.zeros(5, np.int16), ood_noise=np.ones((4, 3)))
    logits, labels, ood = logits_dir.read_npz(ok)
    assert logits.dtype == np.float64 and labels.dtype == np.int64 and ood["noise"].shape == (4, 3)


def test_models_csv_problems_are_errors_naming_the_file_and_column(tmp_path):
    path = tmp_path / "models.csv"
    for text, words in [("name,family\na,x\n", "no 'model' column"), ("model\na\nb\na\n", "listed twice: a"),
                        ("model,accuracy\na,0.5\n", "accuracy would shadow"),
                        ("model,pre_ece_15\na,0.5\n", "pre_ece_15 would shadow"),
                        ("model\na/b\n", "not file names"), ("model,params\na,many\n", "'params' must be numeric"),
                        ("model,family\n", "lists no model")]:
        path.write_text(text)
        with pytest.raises(SourceError, match=words) as err:
            logits_dir.read_models_csv(path)
        assert str(path) in str(err.value)


def test_a_callable_that_cannot_be_imported_names_the_key_and_the_callable(tmp_path):
    with pytest.raises(SourceError, match=r"models\[0\]: cannot import 'no_such_module_x' for 'no_such_module_x:build'"):
        torch_models.load_models({"models": [{"callable": "no_such_module_x:build"}], "python_path": []})
    (tmp_path / "zoo_mod.py").write_text("def build():\n    return 3\n")
    with pytest.raises(SourceError, match="models.0.: module 'zoo_mod' has no 'absent'"):
        torch_models.load_models({"models": [{"callable": "zoo_mod:absent"}], "python_path": [str(tmp_path)]})
    with pytest.raises(SourceError, match="zoo_mod:build: returned int"):
        torch_models.load_models({"models": [{"callable": "zoo_mod:build"}], "python_path": [str(tmp_path)]})


def test_the_population_job_stops_on_an_unimportable_callable_naming_it(tmp_path):
    settings = {"source": "torch", "models": [{"callable": "no_such_module_y:build", "module_sha256": None}],
                "python_path": [], "chunk_size": 2}
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "population", "--settings", json.dumps(settings),
                           "--space", "mine", "--out", str(tmp_path / "mine.json")], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "cannot import 'no_such_module_y' for 'no_such_module_y:build'" in proc.stderr
    assert not (tmp_path / "mine.json").exists()


def test_population_names_and_targets():
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/config.yaml").read_text())
    assert stage.targets(config) == {"tss_200": ("tss", "200"), "sss_90": ("sss", "90")}
    config["populations"] = {"zoo": {"source": "logits", "path": ".", "datasets": ["cifar10"]}}
    assert stage.targets(config)["zoo"] == ("zoo", "")
    for target, pair in stage.targets(config).items():
        assert stage.split_target(target) == pair
    for bad in ("my_zoo", "tss", "1zoo"):
        config["populations"] = {bad: {"source": "logits", "path": ".", "datasets": ["cifar10"]}}
        with pytest.raises(ValueError, match=f"populations.{bad}"):
            stage.targets(config)


def test_a_changed_file_is_measured_again_and_only_its_model_changes(run, tmp_path):
    workdir = tmp_path / "copy"
    shutil.copytree(run[0], workdir, symlinks=True)
    before = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_str")
    path = workdir / "zoo" / "cifar10" / "t600.npz"
    with np.load(path) as f:
        z, y = f["logits"], f["labels"]
    np.savez(path, logits=(z / 3).astype(np.float32), labels=y)  # now t = 2
    _snakemake(workdir, "results/tables/zoo_cifar10.parquet")  # the table only: no analysis (its cost)
    after = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_str")
    assert after.loc["t600", "temperature"] == pytest.approx(before.loc["t600", "temperature"] / 3, rel=1e-4)
    others = [n for n in TEMPERATURES if n != "t600"]
    pd.testing.assert_frame_equal(after.loc[others, ["temperature", "pre_ece_15", "vs_ece_15"]],
                                  before.loc[others, ["temperature", "pre_ece_15", "vs_ece_15"]])
    log = (workdir / "results/logs/infer/zoo_chunk00000.log").read_text()
    # chunk 0 = the six good models: only t600's cifar10 file changed
    assert "11 logits files already stored (skipped), 1 to compute" in log


def test_rerun_one_population_and_dataset_touches_nothing_else(run, tmp_path):
    workdir = tmp_path / "copy"
    shutil.copytree(run[0], workdir, symlinks=True)
    tables = workdir / "results/tables"
    before = {p.name: p.stat().st_mtime_ns for p in tables.glob("*.parquet")}
    (tables / "tiny_own.parquet").unlink()
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml", "--space", "tiny",
                           "--dataset", "own"], cwd=workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = {p.name: p.stat().st_mtime_ns for p in tables.glob("*.parquet")}
    assert set(after) == set(before)
    assert {n for n in after if after[n] != before[n]} == {"tiny_own.parquet"}
    bad = subprocess.run([sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml", "--space", "nope"],
                         cwd=workdir, capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "--space nope: not in this config (spaces and populations: raw, tiny, zoo)" in bad.stderr


def test_a_population_job_that_fails_is_run_once_and_the_tables_it_kept_from_building_are_named(run, tmp_path):
    """The torch population's callable now gives one name twice: its population job fails
    (Snakemake removes the file it had written). That is not damage for a second pass to
    rebuild (it would fail again), and the failures the terminal shows of that population's
    tables are said to be an earlier run's."""
    workdir = tmp_path / "copy"
    shutil.copytree(run[0], workdir, symlinks=True)
    code = workdir / "code" / "tinyzoo.py"
    code.write_text(code.read_text() + "\n\ndef twice():\n    return [('same', more()[0][1]), ('same', more()[0][1])]\n")
    import yaml

    config = yaml.safe_load((workdir / "tiny.yaml").read_text())
    config["populations"]["raw"]["models"] = "tinyzoo:twice"
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run([sys.executable, "-m", "calibench.run.cli", "run", "--configfile", "tiny.yaml", "--space", "raw"],
                          cwd=workdir, capture_output=True, text=True, timeout=600)
    told = proc.stdout + proc.stderr
    assert proc.returncode == 1, told[-3000:]
    assert "population raw: models[0]: tinyzoo:twice gives model 'same', already given by tinyzoo:twice" in told, told[-3000:]
    assert "running once more" not in told and told.count("+ ") == 1, told[-3000:]  # one Snakemake pass
    assert "1 job(s) failed" in told and "0 job(s) run, 1 failed" in told, told[-3000:]
    if "network result(s) missing" in told:  # raw's earlier failures, if it had any, are said to be old
        assert "Not built by this run (a job before them failed), as an earlier run recorded them: raw_cifar10" in told
    assert not (workdir / "results" / "population" / "raw.json").exists()


def test_the_terminal_summary_names_the_tables_an_earlier_run_built(tmp_path):
    """``since``: a table written before the run's start, or absent, whose failures are listed
    is named as an earlier run's; one written since is not."""
    import os
    import time

    from calibench import layout
    from calibench.results import failures as fl

    results = tmp_path / "results"
    old, new = (layout.table_path(results, name, "cifar10") for name in ("zoo", "cnn"))
    for name, table in (("zoo", old), ("cnn", new)):
        table.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"arch_index": [0]}).to_parquet(table)
        fails = layout.failures_path(results, name, "cifar10")
        fails.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"space": [name], "hp": [""], "dataset": ["cifar10"], "arch_index": [1], "seed": [0],
                      "stage": ["inference"], "source": [f"{name}.npz"], "reason": ["broken"]}).to_parquet(fails)
    start = time.time()
    os.utime(old, (start - 100, start - 100))
    said = fl.terminal_summary(results, [old, new], since=start - 1)
    assert said.splitlines()[-1] == ("  Not built by this run (a job before them failed), as an earlier run recorded "
                                     "them: zoo_cifar10"), said
    old.unlink()
    assert fl.terminal_summary(results, [old, new], since=start - 1).endswith("recorded them: zoo_cifar10")
    assert "Not built" not in fl.terminal_summary(results, [old, new])  # no start given: nothing said


def test_a_listed_dataset_without_files_stops_the_run_before_any_job_naming_it(tmp_path):
    root = tmp_path / "zoo"
    (root / "cifar10").mkdir(parents=True)
    (root / "models.csv").write_text("model\na\n")
    np.savez(root / "cifar10" / "a.npz", logits=np.zeros((4, 3), np.float32), labels=np.arange(4) % 3)
    config = {"populations": {"zoo": {"source": "logits", "path": str(root), "datasets": ["cifar10", "cifar100"]}}}
    with pytest.raises(ValueError, match=r"populations.zoo.datasets: no .npz files in .*zoo/cifar100; remove it"):
        stage.population_datasets(config, "zoo")
    config["populations"]["zoo"]["datasets"] = ["cifar10"]
    assert stage.population_datasets(config, "zoo") == ["cifar10"]


def test_own_data_may_give_its_class_count_where_a_class_has_no_test_image(tmp_path):
    """Labels 0..6 of a 10-class task: without ``classes`` the labels job records 7 (the largest
    label + 1, and 10-class models would all fail); with it, 10."""
    images, labels = np.zeros((14, 3, 4, 4), np.uint8), np.arange(14) % 7
    np.savez(tmp_path / "mine.npz", images=images, labels=labels, classes=np.int64(10))
    np.savez(tmp_path / "plain.npz", images=images, labels=labels)
    np.savez(tmp_path / "bad.npz", images=images, labels=labels, classes=np.int64(6))
    assert torch_models.own_data(str(tmp_path / "mine.npz"), "k")[2] == 10
    assert torch_models.own_data(str(tmp_path / "plain.npz"), "k")[2] is None
    with pytest.raises(SourceError, match=r"k: .*bad.npz: classes must be one integer above every label \(largest 6\)"):
        torch_models.own_data(str(tmp_path / "bad.npz"), "k")
    (tmp_path / "owncode.py").write_text("import numpy as np\n\ndef three():\n"
                                         "    return np.zeros((4, 3, 2, 2), np.uint8), np.arange(4), 12\n")
    assert torch_models.own_data("owncode:three", "k", [str(tmp_path)])[2] == 12
    for name, want in (("mine", 10), ("plain", 7)):
        settings = {"data": {name: {"file": str(tmp_path / f"{name}.npz")}}, "python_path": []}
        out = torch_models.write_labels(settings, "zoo", name, tmp_path / f"labels_{name}.parquet")
        assert store.read_labels(out).meta["classes"] == want


def test_a_model_added_at_the_top_of_models_csv_is_the_only_one_measured(run, tmp_path):
    """Each model keeps its index across edits of models.csv (calibench.sources.indices): a model
    added at the top takes the next free index and is the only one measured; the others' rows
    are unchanged (their index was their row, so every one moved and was measured again)."""
    workdir = tmp_path / "copy"
    shutil.copytree(run[0], workdir, symlinks=True)
    before = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_str")
    listed = (workdir / "zoo" / "models.csv").read_text().splitlines()
    for dataset in N:
        shutil.copy(workdir / "zoo" / dataset / "t600.npz", workdir / "zoo" / dataset / "newcomer.npz")
    (workdir / "zoo" / "models.csv").write_text("\n".join([listed[0], "newcomer,a,ce,1", *listed[1:]]) + "\n")
    _snakemake(workdir, "results/tables/zoo_cifar10.parquet")
    after = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_str")
    n_listed = len(listed) - 1
    assert after.loc["newcomer", "arch_index"] == n_listed  # the next free index, not 0
    kept = list(before.index)
    pd.testing.assert_frame_equal(after.loc[kept, before.columns], before)  # every other row as it was
    assert after.loc["newcomer", "temperature"] == pytest.approx(before.loc["t600", "temperature"], rel=1e-12)
    doc = json.loads((workdir / "results/population/zoo.json").read_text())
    assert doc["arch_strs"][n_listed] == "newcomer" and doc["selected"] == list(range(n_listed + 1))
    measured = re.findall(r"(\d+) already measured \(skipped\), (\d+) to measure",
                          "".join(p.read_text() for p in sorted((workdir / "results/logs/measure").glob("zoo_cifar10_*.log"))))
    assert sum(int(m) for _, m in measured) >= 1 and all(m == "0" for _, m in measured[:2]), measured
    # removed again: its index is not reused, the table is as before
    (workdir / "zoo" / "models.csv").write_text("\n".join(listed) + "\n")
    _snakemake(workdir, "results/tables/zoo_cifar10.parquet")
    again = pd.read_parquet(workdir / "results/tables/zoo_cifar10.parquet").set_index("arch_str")
    pd.testing.assert_frame_equal(again[before.columns], before)


def test_the_search_sample_of_an_own_population_moves_only_where_a_model_is_added_or_removed():
    """A population of one's own draws the lambda, mu search's networks by a seeded hash of each
    index: a model added (the next free index) changes the sample only if it enters it (then by
    one network), a model outside it removed changes nothing. NATS-Bench keeps its seeded
    choice over the members (fixed by the config), so finished runs keep their sample."""
    from calibench.config.settings import population_search_sample

    own = {"source": "logits", "selected": list(range(200))}
    sample = population_search_sample(own, 16, 0)
    assert len(sample) == 16 and sample == sorted(set(sample)) and set(sample) <= set(range(200))
    entered = 0
    for new in range(200, 260):
        grown = population_search_sample({**own, "selected": [*own["selected"], new]}, 16, 0)
        assert len(set(grown) - set(sample)) <= 1 and (grown == sample or new in grown)
        entered += new in grown
    assert 0 < entered < 20  # about 60 * 16 / 201 enter
    outside = next(i for i in range(200) if i not in sample)
    assert population_search_sample({**own, "selected": [i for i in range(200) if i != outside]}, 16, 0) == sample
    assert population_search_sample(own, 16, 1) != sample  # the seed draws another
    assert population_search_sample(own, 500, 0) == list(range(200))  # fewer members than asked: all
    nats = {"selected": list(range(200))}
    assert population_search_sample(nats, 16, 0) == sorted(np.random.RandomState(0).choice(200, 16, replace=False))
