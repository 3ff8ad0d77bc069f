"""What identifies the evaluation data a source's logits come from: the parts of a logits key
(the store's :func:`calibench.store.logits.digest`) that every source shares."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from calibench.inference.data import EVAL_FILES, MEAN_STD
from calibench.store.logits import file_sha256


def eval_set_fields(dataset: str, datasets_root: str | Path) -> dict:
    """What identifies an evaluation set: its file's content and NATS-Bench's normalisation
    for it (not its path: moving the datasets keeps the logits valid)."""
    path = Path(datasets_root) / EVAL_FILES[dataset]
    if not path.is_file():
        raise FileNotFoundError(f"{dataset} evaluation set not found: {path} (datasets_root: {datasets_root})")
    return {"dataset": dataset, "file": EVAL_FILES[dataset], "sha256": file_sha256(path),
            "mean_std": MEAN_STD[dataset]}


def ood_fields(dataset: str, ood: Mapping) -> dict | None:
    """The OoD settings a dataset's logits depend on (CIFAR-10 only; None elsewhere)."""
    if dataset != "cifar10":
        return None
    sets = sorted(ood.get("sets", []))
    if "svhn" in sets and not ood.get("svhn"):
        sets.remove("svhn")  # no SVHN file configured: the set is not evaluated
    return {"sets": sets, "noise_severity": int(ood.get("noise_severity", 5)), "noise_seed": 0,
            "svhn_sha256": file_sha256(ood["svhn"]) if "svhn" in sets else None}
