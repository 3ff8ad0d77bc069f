"""Population: meta reading, TSS isomorphism classes, selection."""

import bz2
import pickle
from pathlib import Path

import pytest

from calibench.sources.nats import population as P
from fixtures import SSS_SIMPLE, TSS_SIMPLE, require_shared


@pytest.fixture(scope="module")
def tss_archs():
    require_shared()
    return P.read_meta(TSS_SIMPLE)


@pytest.fixture(scope="module")
def sss_archs():
    require_shared()
    return P.read_meta(SSS_SIMPLE)


def test_real_meta_sizes(tss_archs, sss_archs):
    assert len(tss_archs) == 15625 and len(sss_archs) == 32768
    assert sss_archs[:2] == ["8:8:8:8:8", "8:8:8:8:16"]


def test_exactly_6466_unique_tss_classes(tss_archs):
    reps = P.tss_representatives(tss_archs)
    assert len(reps) == 15625
    assert len(set(reps)) == 6466
    assert all(reps[r] == r and r <= i for i, r in enumerate(reps))  # smallest index represents


def test_representatives_agree_with_nats_bench(tss_archs):
    from nats_bench.genotype_utils import topology_str2structure

    ours = P.tss_representatives(tss_archs)
    first = {}
    for index, arch in enumerate(tss_archs):
        key = topology_str2structure(arch).to_unique_str(consider_zero=True)
        assert ours[index] == first.setdefault(key, index), index


def test_canonical_form_examples():
    a = "|skip_connect~0|+|none~0|nor_conv_3x3~1|+|none~0|none~1|nor_conv_3x3~2|"
    b = "|skip_connect~0|+|nor_conv_3x3~0|none~1|+|none~0|none~1|nor_conv_3x3~2|"
    c = "|nor_conv_3x3~0|+|nor_conv_1x1~0|none~1|+|none~0|none~1|nor_conv_3x3~2|"
    assert P.tss_canonical_form(a) == P.tss_canonical_form(b)
    assert P.tss_canonical_form(a) != P.tss_canonical_form(c)
    assert P.tss_representatives([c, a, b]) == [0, 1, 1]


def test_selection_modes(tss_archs, sss_archs):
    unique = P.select("tss", tss_archs)
    assert len(unique) == 6466 and unique == sorted(unique)
    assert P.select("tss", tss_archs, {"mode": "all"}) == list(range(15625))
    assert P.select("sss", sss_archs) == list(range(32768))
    reps = P.tss_representatives(tss_archs)
    chosen = P.select("tss", tss_archs, {"mode": "range", "start": 0, "stop": 300})
    assert chosen == sorted({reps[i] for i in range(300)})
    assert P.select("tss", tss_archs, {"mode": "range", "start": 0, "stop": 300, "unique_only": False}) == list(range(300))
    assert P.select("tss", tss_archs, {"mode": "list", "indices": [11, 0, 284]}) == sorted({reps[0], reps[11], reps[284]})
    s1 = P.select("tss", tss_archs, {"mode": "sample", "n": 20, "seed": 3})
    assert s1 == P.select("tss", tss_archs, {"mode": "sample", "n": 20, "seed": 3})
    assert len(s1) == 20 and set(s1) <= set(unique)
    assert s1 != P.select("tss", tss_archs, {"mode": "sample", "n": 20, "seed": 4})
    assert len(P.select("sss", sss_archs, {"mode": "sample", "n": 7, "seed": 0})) == 7


def test_selection_errors(sss_archs):
    with pytest.raises(ValueError, match="mode"):
        P.select("sss", sss_archs, {"mode": "some"})
    with pytest.raises(ValueError, match=r"index 40000 is outside \[0, 32768\)"):
        P.select("sss", sss_archs, {"mode": "list", "indices": [1, 40000]})
    with pytest.raises(ValueError, match="unknown keys"):
        P.select("sss", sss_archs, {"mode": "all", "stride": 2})
    with pytest.raises(ValueError, match="space"):
        P.select("nas201", sss_archs)


def test_meta_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="meta.pickle.pbz2"):
        P.read_meta(tmp_path)
    (tmp_path / "meta.pickle.pbz2").write_bytes(b"not bz2")
    with pytest.raises(ValueError, match="cannot read the archive meta"):
        P.read_meta(tmp_path)
    with bz2.open(tmp_path / "meta.pickle.pbz2", "wb") as f:
        pickle.dump({"archs": []}, f)
    with pytest.raises(ValueError, match="no 'meta_archs'"):
        P.read_meta(tmp_path)


class _Runs:
    """A pickle that would run a command when loaded by plain pickle.load."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_meta_file_that_would_run_code_is_refused_naming_file_and_global(tmp_path):
    marker = tmp_path / "ran"
    with bz2.open(tmp_path / "meta.pickle.pbz2", "wb") as f:
        pickle.dump({"meta_archs": [_Runs(marker)], "total_archs": 1}, f)
    with pytest.raises(ValueError, match=r"meta.pickle.pbz2: cannot read the archive meta .*refusing global "
                                         r"pathlib\.Path\.touch"):
        P.read_meta(tmp_path)
    assert not marker.exists()


def test_chunks():
    assert P.chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    with pytest.raises(ValueError):
        P.chunks([1], 0)
