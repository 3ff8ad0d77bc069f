"""A logits population at real size: what importing a model zoo's logits into the store costs
per model, and the population, labels and import jobs' own overhead.

    python bench/bench_populations.py                   # 64 models, CIFAR-100 size (10,000 x 100)
    python bench/bench_populations.py --models 256 --n 50000 --k 1000   # ImageNet-1k size

Writes a README-layout directory (models.csv, one npz per model, float32 logits, synthetic
but with real mantissa entropy), then runs the source's own jobs as the workflow does:
the population (models.csv), the labels (majority over every file's labels) and the
import of every chunk (read, check, hash, write the store file); then a second import,
which must read nothing but footers. Measurement from the store is the same for every
source (bench/bench_recalibration.py, bench/bench_store.py).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from calibench import layout
from calibench.store import logits as store
from calibench.config.settings import INFERENCE_VERSION
from calibench.sources import infer_chunk, write_labels, write_population


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=64)
    parser.add_argument("--n", type=int, default=10_000, help="test images")
    parser.add_argument("--k", type=int, default=100, help="classes")
    parser.add_argument("--chunk-size", type=int, default=16)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "zoo"
        (root / "data").mkdir(parents=True)
        y = rng.integers(0, args.k, args.n)
        t0 = time.perf_counter()
        for i in range(args.models):
            z = (rng.normal(size=(args.n, args.k)) * rng.uniform(0.5, 3.0)).astype(np.float32)
            np.savez(root / "data" / f"m{i:05d}.npz", logits=z, labels=y)
        (root / "models.csv").write_text("model,family\n" + "".join(f"m{i:05d},f{i % 4}\n" for i in range(args.models)))
        written = time.perf_counter() - t0
        mb = sum(p.stat().st_size for p in (root / "data").glob("*.npz")) / 1e6
        results = Path(tmp) / "results"
        settings = {"source": "logits", "path": str(root), "datasets": ["data"], "chunk_size": args.chunk_size}
        t0 = time.perf_counter()
        doc = write_population(settings, "zoo", results / "population" / "zoo.json")
        t_pop = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_labels(settings, "data", layout.labels_path(results, "data", space="zoo"), space="zoo")
        t_labels = time.perf_counter() - t0
        run = {**settings, "inference_version": INFERENCE_VERSION}
        t0 = time.perf_counter()
        for c in range(len(doc["chunks"])):
            infer_chunk(run, {}, "zoo", "", c, results, Path(tmp) / f"m{c}.json", progress=False)
        t_import = time.perf_counter() - t0
        store._file_sha256.cache_clear()  # a rerun is a fresh process: every file is hashed again
        t0 = time.perf_counter()
        for c in range(len(doc["chunks"])):
            again = infer_chunk(run, {}, "zoo", "", c, results, Path(tmp) / f"m{c}.json", progress=False)
            assert again["computed"] == 0
        t_again = time.perf_counter() - t0
        stored = sum(p.stat().st_size for p in (results / "logits").rglob("arch=*.parquet")) / 1e6
    print(f"{args.models} models, logits {args.n} x {args.k} float32: {mb:.0f} MB of npz ({written:.1f} s to write)")
    print(f"population job (models.csv):        {t_pop * 1e3:8.1f} ms")
    print(f"labels job (every file's labels):   {t_labels:8.2f} s   ({t_labels / args.models * 1e3:.1f} ms per model)")
    print(f"import, every chunk:                {t_import:8.2f} s   ({t_import / args.models * 1e3:.1f} ms per model, "
          f"{mb / t_import:.0f} MB/s); store {stored:.0f} MB")
    print(f"import again (all valid):           {t_again:8.2f} s   ({t_again / args.models * 1e3:.1f} ms per model: "
          "hash and footer only)")


if __name__ == "__main__":
    main()
