"""NATS-Bench indices (calibench.sources.nats.indices): every architecture of the mini
benchmark has its NATS-Bench index (the published meta's position of its string), which the
population records as ``nats_index`` for joins by index, whatever the archive's own index.
Checked against the published metas of the shared fixtures (skipped without them)."""

from __future__ import annotations

import random

import pytest

from calibench.sources.nats import indices, population
from calibench.sources.nats.jobs import write_population
from calibench.sources.nats.minibench import SSS_DIR, TSS_DIR, sample_real_size_archs, sample_tss_archs
from fixtures import SSS_SIMPLE, TSS_SIMPLE, require_shared


@pytest.fixture(scope="module")
def metas():
    require_shared()
    return {"tss": population.read_meta(TSS_SIMPLE), "sss": population.read_meta(SSS_SIMPLE)}


def test_the_known_tss_cells_are_the_published_meta_s(metas):
    assert len(indices.TSS_KNOWN) == 64 and len({i for i, _ in indices.TSS_KNOWN}) == 64
    for index, arch in indices.TSS_KNOWN:
        assert metas["tss"][index] == arch, index
    (a, _), (b, _) = indices.TSS_KNOWN[:2]  # the isomorphic pair the mini benchmark starts with
    reps = population.tss_representatives(metas["tss"])
    assert reps[a] == reps[b]
    classes = {reps[i] for i, _ in indices.TSS_KNOWN[2:]}
    assert len(classes) == 62 and reps[a] not in classes


def test_the_sss_index_is_the_position_in_the_published_meta(metas):
    assert [indices.sss_index(a) for a in metas["sss"]] == list(range(indices.SSS_SIZE))
    assert indices.nats_indices("sss", metas["sss"][5:8]) == [5, 6, 7]


def test_a_whole_space_s_meta_is_indexed_by_position_and_other_cells_are_unknown(metas):
    assert indices.nats_indices("tss", metas["tss"]) == list(range(indices.TSS_SIZE))
    known = dict((a, i) for i, a in indices.TSS_KNOWN)
    unknown = next(a for a in metas["tss"] if a not in known)
    assert indices.nats_indices("tss", [unknown, indices.TSS_KNOWN[5][1]]) == [None, indices.TSS_KNOWN[5][0]]
    with pytest.raises(ValueError, match="conv_9x9"):
        indices.tss_index("|conv_9x9~0|+|none~0|none~1|+|none~0|none~1|none~2|")


def test_the_mini_benchmark_s_indices_are_nats_bench_s(metas, tiny_minibench, tmp_path):
    """The population of the mini benchmark records, for each of its own indices 0..n-1, the
    NATS-Bench index of the cell: the position of its string in the published meta."""
    for space, directory in (("tss", TSS_DIR), ("sss", SSS_DIR)):
        settings = {"archive": str(tiny_minibench / directory), "population": {"mode": "all"}, "chunk_size": 2}
        doc = write_population(settings, space, tmp_path / f"{space}.json")
        assert len(doc["arch_strs"]) == 3 and None not in doc["nats_index"]
        assert doc["nats_index"] == [metas[space].index(a) for a in doc["arch_strs"]]
        assert doc["nats_index"] != list(range(3))  # its own indices are not NATS-Bench's


def test_the_mini_benchmark_draws_tss_cells_of_known_index():
    known = {a for _, a in indices.TSS_KNOWN}
    for seed in range(5):
        cells = sample_tss_archs(random.Random(seed), 10)
        assert len(set(cells)) == 10 and set(cells) <= known
        assert cells[:2] == [a for _, a in indices.TSS_KNOWN[:2]]
    assert set(sample_tss_archs(random.Random(0), 64)) == known
    with pytest.raises(ValueError, match="n_tss = 65: .* 64 cells of known NATS-Bench index"):
        sample_tss_archs(random.Random(0), 65)
    assert set(sample_real_size_archs("tss", random.Random(0), 4)) <= known
