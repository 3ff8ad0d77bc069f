"""Logits of a chunk of NATS networks (the NATS source's side of the inference engine).

For a chunk of architectures of one (space, hp): weights come from the archive
(prefetched in the background, each file read once for every dataset), each network
is built, loaded with ``strict=True``, converted to its inference form and run over
each dataset's evaluation set (held once on the device) and, for CIFAR-10, the OoD
sets (:func:`calibench.inference.engine.launch_logits`, then ``finish_logits``). One broken
architecture (missing or corrupt file, state-dict mismatch, non-finite logits) becomes a
:class:`~calibench.inference.engine.Failure` naming its index, file and reason; the rest go on.

``networks_per_pass`` (runtime only: never in a logits key): 1 runs each network alone, as
above, one network ahead (:func:`_one_ahead`: the next network is prepared and enqueued before
the last one's logits come back, so a GPU is not left waiting for the host; the CPU default,
bit-equal to earlier runs); more than 1 runs buckets of networks of one
dataset together (:mod:`calibench.sources.nats.stacked`: SSS networks of similar widths,
zero-padded; the seeds of one TSS cell), one bucket ahead in the same way, logits within
float32 rounding of one-by-one. A
network whose state dict does not fit fails alone before any bucket is formed; a bucket whose
pass fails runs its networks one by one, and a network with non-finite logits in a bucket
runs again alone, so the failures are those of the one-by-one path.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from calibench.inference.engine import (EvalData, Failure, Launched, activation_format, finish_logits, launch_logits,
                                        module_to_device)
from calibench.sources.nats.archive import ArchiveEntry, ArchiveError, NatsArchive, prefetch
from calibench.inference.precision import with_precision
from calibench.sources.nats.networks import TinyNetwork, build_network, inference_network
from calibench.sources.nats.stacked import StackedNetwork, bucket_entries, launch_stacked, resolve_networks_per_pass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NetworkLogits:
    """One network's float32 logits on the evaluation set (and OoD sets), on the CPU."""

    entry: ArchiveEntry
    logits: torch.Tensor  # (N, K)
    ood_logits: dict[str, torch.Tensor]


def load_network(entry: ArchiveEntry) -> TinyNetwork:
    """Build ``entry``'s network and load its state dict (strict); ValueError with the reason if it does not fit."""
    net = build_network(entry.space, entry.arch_str, entry.num_classes)
    try:
        net.load_state_dict(entry.state_dict, strict=True)
    except RuntimeError as exc:
        first_line = str(exc).strip().splitlines()
        raise ValueError(f"state dict does not fit {entry.space} {entry.arch_str}: {' '.join(first_line[:3])}") from exc
    return net


def launch_network(entry: ArchiveEntry, eval_data: EvalData, device: torch.device, batch_size: int = 1000,
                   net: TinyNetwork | None = None, precision: str = "float32") -> Launched:
    """Build, load (strict) and convert one network (``net``: already loaded) in ``precision``
    (:mod:`calibench.inference.precision`) and enqueue its passes (:func:`launch_logits`);
    ValueError with the reason if it does not fit."""
    if net is None:
        net = load_network(entry)
    fast = module_to_device(with_precision(inference_network(net, activation_format(device)), precision), device)
    return launch_logits(fast, eval_data, batch_size)


def network_logits(
    entry: ArchiveEntry, eval_data: EvalData, device: torch.device, batch_size: int = 1000,
    net: TinyNetwork | None = None, precision: str = "float32",
) -> NetworkLogits:
    """:func:`launch_network`, then its logits on the CPU, checked (:func:`finish_logits`);
    ValueError with the reason if it fails."""
    launched = launch_network(entry, eval_data, device, batch_size, net, precision)
    logits, ood = finish_logits(launched, eval_data, entry.num_classes)
    return NetworkLogits(entry, logits, ood)


def chunk_logits(
    archive: NatsArchive,
    todo: Mapping[int, Sequence[str]],
    eval_sets: Mapping[str, EvalData],
    device: torch.device,
    seeds: Sequence[int] | None = None,
    batch_size: int = 1000,
    prefetch_depth: int = 4,
    loader_workers: int = 1,
    networks_per_pass: int | str = 1,
    precision: str = "float32",
) -> Iterator[tuple[int, str, list[NetworkLogits] | Failure]]:
    """Logits of a chunk: ``todo`` maps each architecture index to the datasets it still needs.

    Each architecture file is read once for all of its datasets (issue 9). Yields, in
    order, ``(index, dataset, logits of every seed)`` or ``(index, dataset, Failure)``: a
    dataset's seeds succeed or fail together, so a stored file always holds them all; a
    failure names the first seed (in seed order) that failed.

    ``networks_per_pass``: 1 (each network alone), a larger number (the architectures are
    taken that many at a time and their networks run in buckets of at most that many, see
    the module's note) or ``auto`` (:func:`~calibench.sources.nats.stacked.resolve_networks_per_pass`).
    ``precision``: the arithmetic of the convolutions (:mod:`calibench.inference.precision`).
    """
    per_pass = resolve_networks_per_pass(networks_per_pass, device, archive.space)
    datasets = [d for d in eval_sets if any(d in needed for needed in todo.values())]
    depth = prefetch_depth if per_pass == 1 else max(prefetch_depth, per_pass)  # the next window loads meanwhile
    stream = prefetch(archive, list(todo), datasets, seeds, depth, loader_workers)
    if per_pass == 1:
        yield from _one_ahead(_units(archive, stream, todo), eval_sets, device, batch_size, precision)
        return
    for window in _windows(stream, per_pass):
        yield from _stacked_window(archive, window, todo, eval_sets, device, batch_size, per_pass, precision)


def _units(archive: NatsArchive, stream: Iterable, todo: Mapping[int, Sequence[str]]) -> Iterator[tuple]:
    """The chunk's work in order: ``(index, dataset, entries)`` for each (architecture, dataset)
    to run (its seeds' entries), ``(index, dataset, Failure)`` for one that cannot run."""
    for index, loaded in stream:
        if isinstance(loaded, ArchiveError):
            log.warning("skipping %s", loaded)
            for dataset in todo[index]:
                yield index, dataset, Failure(index, loaded.path, loaded.reason, dataset=dataset)
            continue
        for dataset in todo[index]:
            entries = [e for e in loaded if e.dataset == dataset]
            yield index, dataset, entries or Failure(index, str(archive.archive_dir), "no entries loaded",
                                                     dataset=dataset)


def _launch(entry: ArchiveEntry, eval_data: EvalData, device: torch.device, batch_size: int, precision: str,
            net: TinyNetwork | None = None):
    """:func:`launch_network`, or the exception that stopped it (kept for its turn to be collected)."""
    try:
        return launch_network(entry, eval_data, device, batch_size, net, precision)
    except (ValueError, RuntimeError) as exc:
        return exc


def _one_ahead(units: Iterable[tuple], eval_sets: Mapping[str, EvalData], device: torch.device, batch_size: int,
               precision: str = "float32") -> Iterator[tuple[int, str, list[NetworkLogits] | Failure]]:
    """Each unit's logits of every seed (or its Failure), in order, one network ahead: network
    i+1 is built, loaded, converted and its passes enqueued before network i's logits are
    brought back, so on a GPU the host's work on one network overlaps the device's on the
    one before (on the CPU the same calls run in turn). The same results and failures as one
    network at a time: a dataset's seeds succeed or fail together, the first seed (in seed
    order) that fails names the failure, and the seeds after it are not kept."""
    plan: list[tuple | None] = []  # the units seen, in order (None once yielded: their weights freed)
    results: dict[int, list[NetworkLogits]] = {}
    failed: dict[int, Failure] = {}
    done = 0  # units yielded

    def networks():  # (unit number, entry) of each network to run; (unit number, None) for a unit that cannot
        for unit in units:
            plan.append(unit)
            work = unit[2]
            if isinstance(work, Failure):
                yield len(plan) - 1, None
            else:
                for entry in work:
                    yield len(plan) - 1, entry

    def collect(u: int, entry: ArchiveEntry, launched) -> None:
        if u in failed:  # an earlier seed of the unit failed: this one's logits are not kept
            return
        index, dataset, _ = plan[u]
        try:
            if isinstance(launched, Exception):
                raise launched
            logits, ood = finish_logits(launched, eval_sets[dataset], entry.num_classes)
        except (ValueError, RuntimeError) as exc:
            log.warning("skipping architecture %d %s seed %d (%s): %s", index, dataset, entry.seed, entry.source, exc)
            failed[u] = Failure(index, entry.source, str(exc), entry.seed, dataset)
            results.pop(u, None)
            return
        results.setdefault(u, []).append(NetworkLogits(entry, logits, ood))

    def ready():  # the units, in order, as far as they are complete
        nonlocal done
        while done < len(plan):
            index, dataset, work = plan[done]
            if isinstance(work, Failure):
                yield index, dataset, work
            elif done in failed:
                yield index, dataset, failed[done]
            elif len(results.get(done, ())) == len(work):
                yield index, dataset, results.pop(done)
            else:
                return
            plan[done] = None
            done += 1

    pending = None  # (unit number, entry, what _launch gave) of the network enqueued last
    for u, entry in networks():
        launched = None
        if entry is not None and u not in failed:
            launched = _launch(entry, eval_sets[plan[u][1]], device, batch_size, precision)
        if pending is not None:
            collect(*pending)  # the network before, now that this one is enqueued
            pending = None
        if launched is not None:
            pending = (u, entry, launched)
        yield from ready()
    if pending is not None:
        collect(*pending)
    yield from ready()


def _windows(items: Iterable, size: int) -> Iterator[list]:
    window: list = []
    for item in items:
        window.append(item)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def _alone(entry: ArchiveEntry, net: TinyNetwork, eval_data: EvalData, device: torch.device,
           batch_size: int, precision: str = "float32") -> NetworkLogits | Exception:
    try:
        return network_logits(entry, eval_data, device, batch_size, net, precision)
    except (ValueError, RuntimeError) as exc:
        return exc


def _launch_bucket(members: list[tuple[ArchiveEntry, TinyNetwork]], eval_data: EvalData, device: torch.device,
                   batch_size: int, precision: str = "float32") -> Launched | Exception:
    """The bucket's passes enqueued (one network alone, or the stack of all), or the exception
    that stopped them; :func:`_collect_bucket` brings them back."""
    if len(members) == 1:
        entry, net = members[0]
        return _launch(entry, eval_data, device, batch_size, precision, net)
    try:
        channels_last = activation_format(device) == torch.channels_last
        stack = module_to_device(with_precision(StackedNetwork([net for _, net in members], channels_last), precision),
                                 device)
        return launch_stacked(stack, eval_data.images, eval_data.ood, batch_size)
    except (ValueError, RuntimeError) as exc:  # out of memory, a network that does not stack, ...
        return exc


def _collect_bucket(members: list[tuple[ArchiveEntry, TinyNetwork]], launched: Launched | Exception,
                    eval_data: EvalData, device: torch.device, batch_size: int, precision: str = "float32"
                    ) -> list[NetworkLogits | Exception]:
    """Each member's logits (or the exception that stopped it), from the bucket's passes where
    they worked; a failing stacked pass runs them one by one, and a member whose stacked logits
    are not ``(N, K)`` and finite runs again alone (so its failure, if any, is the one-by-one one)."""
    if len(members) == 1:
        entry = members[0][0]
        try:
            if isinstance(launched, Exception):
                raise launched
            return [NetworkLogits(entry, *finish_logits(launched, eval_data, entry.num_classes))]
        except (ValueError, RuntimeError) as exc:
            return [exc]
    try:
        if isinstance(launched, Exception):
            raise launched
        logits, ood = launched.host()
    except (ValueError, RuntimeError) as exc:
        if device.type == "cuda":
            torch.cuda.empty_cache()  # what the failed pass held, for the networks one by one
        log.warning("a pass of %d networks (architectures %s, %s) failed, running them one by one: %s", len(members),
                    sorted({e.index for e, _ in members}), eval_data.dataset, exc)
        return [_alone(entry, net, eval_data, device, batch_size, precision) for entry, net in members]
    out: list[NetworkLogits | Exception] = []
    for m, (entry, net) in enumerate(members):
        own = logits[m]
        if own.shape != (eval_data.n, entry.num_classes) or not bool(torch.isfinite(own).all()):
            out.append(_alone(entry, net, eval_data, device, batch_size, precision))
        else:
            out.append(NetworkLogits(entry, own.clone(), {name: v[m].clone() for name, v in ood.items()}))
    return out


def _stacked_window(archive: NatsArchive, window: list, todo: Mapping[int, Sequence[str]],
                    eval_sets: Mapping[str, EvalData], device: torch.device, batch_size: int, per_pass: int,
                    precision: str = "float32"):
    """The window's ``(index, dataset, ...)`` in order, as :func:`_one_ahead` gives them; each
    as soon as it and those before it are done."""
    pairs: list[tuple[int, str]] = []
    known: dict[tuple[int, str], Failure] = {}
    slots: dict[tuple[int, str], tuple[list[ArchiveEntry], list]] = {}
    runs: list[tuple[tuple[int, str], int, ArchiveEntry, TinyNetwork]] = []
    for index, loaded in window:
        if isinstance(loaded, ArchiveError):
            log.warning("skipping %s", loaded)
        for dataset in todo[index]:
            pair = (index, dataset)
            pairs.append(pair)
            if isinstance(loaded, ArchiveError):
                known[pair] = Failure(index, loaded.path, loaded.reason, dataset=dataset)
                continue
            entries = [e for e in loaded if e.dataset == dataset]
            if not entries:
                known[pair] = Failure(index, str(archive.archive_dir), "no entries loaded", dataset=dataset)
                continue
            results: list = []
            for entry in entries:
                try:
                    net = load_network(entry)
                except ValueError as exc:  # this seed fails; the later ones are not run (as one by one)
                    results.append(exc)
                    break
                runs.append((pair, len(results), entry, net))
                results.append(None)
            slots[pair] = (entries, results)

    def outcome(pair: tuple[int, str]) -> list[NetworkLogits] | Failure:
        if pair in known:
            return known[pair]
        entries, results = slots.pop(pair)
        for entry, result in zip(entries, results):
            if isinstance(result, Exception):
                log.warning("skipping architecture %d %s seed %d (%s): %s", pair[0], pair[1], entry.seed,
                            entry.source, result)
                return Failure(pair[0], entry.source, str(result), entry.seed, pair[1])
        return results

    def ready(pair: tuple[int, str]) -> bool:
        return pair in known or all(r is not None for r in slots[pair][1])

    done = 0
    pending = None  # (members, launched) of the bucket enqueued last, collected once the next is enqueued

    def collect(members, launched):
        dataset = members[0][2].dataset
        results = _collect_bucket([(entry, net) for _, _, entry, net in members], launched, eval_sets[dataset],
                                  device, batch_size, precision)
        for (pair, k, _, _), result in zip(members, results):
            slots[pair][1][k] = result

    for bucket in bucket_entries([(e.space, e.dataset, e.arch_str) for _, _, e, _ in runs], per_pass):
        members = [runs[i] for i in bucket]
        launched = _launch_bucket([(entry, net) for _, _, entry, net in members], eval_sets[members[0][2].dataset],
                                  device, batch_size, precision)
        if pending is not None:  # the bucket before, now that this one is enqueued (one bucket ahead)
            collect(*pending)
        pending = (members, launched)
        while done < len(pairs) and ready(pairs[done]):
            yield (*pairs[done], outcome(pairs[done]))
            done += 1
    if pending is not None:
        collect(*pending)
    for pair in pairs[done:]:
        yield (*pair, outcome(pair))
