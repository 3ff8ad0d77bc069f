"""The mini benchmark's synthetic images (:mod:`calibench.sources.nats.minibench`): per-class
smooth colour patterns, shifted, contrast-jittered and noised. NOT real images."""

from __future__ import annotations

import numpy as np


def class_patterns(rng: np.random.Generator, num_classes: int, size: int) -> np.ndarray:
    """One smooth colour pattern per class: a few random 2-D waves per channel, in [0, 1]."""
    yy, xx = np.meshgrid(np.linspace(0, 1, size), np.linspace(0, 1, size), indexing="ij")
    waves = 4
    fy, fx = rng.uniform(0.5, 3.0, size=(2, num_classes, 3, waves))
    phase = rng.uniform(0, 2 * np.pi, size=(num_classes, 3, waves))
    amp = rng.uniform(0.3, 1.0, size=(num_classes, 3, waves))
    arg = 2 * np.pi * (fy[..., None, None] * yy + fx[..., None, None] * xx) + phase[..., None, None]
    pattern = (amp[..., None, None] * np.sin(arg)).sum(axis=2)
    pattern -= pattern.min(axis=(1, 2, 3), keepdims=True)
    pattern /= pattern.max(axis=(1, 2, 3), keepdims=True)
    colour = rng.uniform(0.0, 1.0, size=(num_classes, 3, 1, 1))  # each class also has its own tint
    return 0.5 * pattern + 0.5 * colour  # (C, 3, H, W) in [0, 1]


def synthetic_images(rng: np.random.Generator, patterns: np.ndarray, labels: np.ndarray, noise: float) -> np.ndarray:
    """uint8 images (N, 3, H, W): each label's pattern, randomly shifted, contrast-jittered and noised."""
    n = len(labels)
    size = patterns.shape[-1]
    images = patterns[labels]
    shift = rng.integers(-size // 8, size // 8 + 1, size=(n, 2))
    rows = (np.arange(size)[None, :] - shift[:, :1]) % size
    cols = (np.arange(size)[None, :] - shift[:, 1:]) % size
    images = images[np.arange(n)[:, None, None, None], np.arange(3)[None, :, None, None],
                     rows[:, None, :, None], cols[:, None, None, :]]
    contrast = rng.uniform(0.5, 1.0, size=(n, 1, 1, 1))
    offset = rng.uniform(0.0, 0.5, size=(n, 1, 1, 1)) * (1 - contrast)
    images = images * contrast + offset + rng.normal(0, noise, size=images.shape)
    return (np.clip(images, 0, 1) * 255).round().astype(np.uint8)
