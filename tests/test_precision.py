"""Inference precision modes (issue 32, item 3; calibench.inference.precision): TF32 rounding
against an independent oracle, the compensated mode's error against float64 (emulated on the
CPU, as bench/bench_precision.py measures on 16 architectures per space), and the setting's
place in the logits key."""

import numpy as np
import pytest
import torch
from torch import nn

from calibench.inference.precision import round_to_tf32, split_tf32, with_precision
from calibench.inference.precision_modes import PRECISIONS, precision_fields
from calibench.sources.nats.networks import inference_network


def _tf32_oracle(x: np.ndarray) -> np.ndarray:
    """11 significant bits, to nearest even, through float64's frexp (normal float32 numbers)."""
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(np.rint(m * 2.0**11) / 2.0**11, e).astype(np.float32)


def test_rounding_to_tf32_is_to_nearest_even_and_the_split_is_exact():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(200_000) * np.exp(rng.uniform(-40, 40, 200_000))).astype(np.float32)
    ties = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11), 1 + 2.0**-10 + 2.0**-11], dtype=np.float32)
    x = np.concatenate([x, ties, [0.0, -0.0, 1.0, 65504.0]]).astype(np.float32)
    got = round_to_tf32(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, _tf32_oracle(x))
    np.testing.assert_array_equal(got[-8:-4], np.array([1.0, 1 + 2.0**-9, -1.0, 1 + 2.0**-9], dtype=np.float32))
    hi, lo = split_tf32(torch.from_numpy(x))
    np.testing.assert_array_equal((hi + lo).numpy(), x)
    assert (hi.view(torch.int32) & 0x1FFF == 0).all()  # 13 low mantissa bits clear
    special = torch.tensor([float("inf"), -float("inf"), float("nan")])
    out = round_to_tf32(special)
    assert out[0] == float("inf") and out[1] == -float("inf") and torch.isnan(out[2])
    with pytest.raises(TypeError, match="expected float32"):
        round_to_tf32(torch.ones(2, dtype=torch.float64))


def _randomised(space: str, arch: str) -> nn.Module:
    from test_stacked_inference import _randomised as randomised  # one random-weights helper for the tests

    return randomised(space, arch, 100, seed=5)


@pytest.mark.parametrize("space, arch", [("sss", "8:64:8:64:8"),
                                         ("tss", "|nor_conv_3x3~0|+|none~0|avg_pool_3x3~1|+|skip_connect~0|"
                                                 "nor_conv_1x1~1|nor_conv_3x3~2|")])
def test_compensated_tf32_keeps_float32_accuracy_and_plain_tf32_does_not(space, arch):
    net = _randomised(space, arch)
    images = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = net.double()(images.double())[1]
        net.float()
    scale = float(ref.abs().max())
    errors = {}
    for mode in PRECISIONS:
        fast = inference_network(net)
        converted = with_precision(fast, mode)
        assert (converted is fast) and (mode != "float32" or not any(
            type(m).__name__ == "_LowPrecision" for m in fast.modules()))
        with torch.inference_mode():
            errors[mode] = float((converted(images).double() - ref).abs().max()) / scale
    assert errors["float32"] < 2e-6 and errors["tf32x3"] < 2e-6  # bench_precision: 1.3e-7 to 7.6e-6 on 32 archs
    assert errors["tf32"] > 2e-5  # the emulation is on: plain TF32 is 2.5e-4 to 1.4e-2 there


def test_precision_enters_the_logits_key_only_when_it_is_not_float32():
    from calibench.config.settings import inference_settings

    assert precision_fields("float32") == {} and precision_fields("tf32x3") == {"precision": "tf32x3"}
    with pytest.raises(ValueError, match="precision: expected one of"):
        precision_fields("bf16")
    config = {"archives": {"tss": "a"}, "seeds": "first", "datasets": ["cifar10"], "datasets_root": "d",
              "ood": {"sets": []}}
    assert "precision" not in inference_settings(config, "tss")  # params of runs from before the setting
    assert "precision" not in inference_settings({**config, "precision": "float32"}, "tss")
    assert inference_settings({**config, "precision": "tf32x3"}, "tss")["precision"] == "tf32x3"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["float32", "tf32x3"])
def test_cuda_logits_of_each_claiming_mode_agree_with_float64_within_1e_4(mode):
    from calibench.inference.engine import resolve_device

    device = resolve_device("cuda")
    for space, arch in [("sss", "64:64:64:64:64"), ("sss", "8:8:8:8:8"),
                        ("tss", "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|nor_conv_3x3~0|nor_conv_3x3~1|"
                                "nor_conv_3x3~2|")]:
        net = _randomised(space, arch)
        images = torch.randn(64, 3, 32, 32, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            ref = net.double()(images.double())[1]
            net.float()
        fast = with_precision(inference_network(net), mode).to(device)
        with torch.inference_mode():
            z = fast(images.to(device).contiguous(memory_format=torch.channels_last)).double().cpu()
        assert float((z - ref).abs().max()) / float(ref.abs().max()) < 1e-4, (space, arch, mode)
    assert not torch.backends.cudnn.allow_tf32  # the modes switch TF32 on around their products only


@pytest.mark.parametrize("per_pass", [1, 4])
def test_chunk_logits_in_tf32x3_stay_within_float32s_error_one_by_one_and_stacked(per_pass):
    """The job's own path (calibench.sources.nats.stream.chunk_logits): one by one and in stacked
    passes, tf32x3 (emulated) gives logits within 2e-6 of float32's, and not float32's own."""
    from test_stacked_inference import SSS_CHUNK, FakeArchive, _images

    from calibench.inference.engine import EvalData
    from calibench.sources.nats import stream

    eval_sets = {"cifar10": EvalData("cifar10", _images(10, seed=3), torch.zeros(10, dtype=torch.long), "synthetic",
                                     {"gaussian_noise": _images(6, seed=4)})}
    archive = FakeArchive("sss", SSS_CHUNK[:4])
    todo = {i: ["cifar10"] for i in range(4)}
    runs = {mode: list(stream.chunk_logits(archive, todo, eval_sets, torch.device("cpu"), batch_size=8,
                                           networks_per_pass=per_pass, precision=mode))
            for mode in ("float32", "tf32x3")}
    assert [(i, d) for i, d, _ in runs["float32"]] == [(i, d) for i, d, _ in runs["tf32x3"]] == [
        (i, "cifar10") for i in range(4)]
    for (_, _, ref), (_, _, got) in zip(runs["float32"], runs["tf32x3"]):
        a, b = ref[0], got[0]
        scale = float(a.logits.abs().max())
        assert 0 < float((a.logits - b.logits).abs().max()) / scale < 2e-6
        assert float((a.ood_logits["gaussian_noise"] - b.ood_logits["gaussian_noise"]).abs().max()) / scale < 2e-6


def test_the_nats_logits_key_records_a_precision_other_than_float32(monkeypatch):
    from calibench.sources import keys
    from calibench.sources.nats.jobs import key_fields

    monkeypatch.setattr(keys, "eval_set_fields", lambda dataset, root: {"dataset": dataset, "sha256": "x"})

    settings = {"archive": "/a/NATS-sss-v1_0-50262-full", "seeds": "first", "datasets_root": "/d",
                "ood": {"sets": [], "noise_severity": 5}}
    plain = key_fields(settings, "sss", "90", "cifar100", 3, "8:8:8:8:8", "abc")
    assert "precision" not in plain  # logits stored before the setting keep their key
    assert key_fields({**settings, "precision": "float32"}, "sss", "90", "cifar100", 3, "8:8:8:8:8", "abc") == plain
    fast = key_fields({**settings, "precision": "tf32x3"}, "sss", "90", "cifar100", 3, "8:8:8:8:8", "abc")
    assert fast == {**plain, "precision": "tf32x3"}
