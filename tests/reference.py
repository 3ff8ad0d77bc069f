"""Direct, loop-by-loop transcriptions of docs/metrics.md, written for the tests.

Deliberately naive: per-sample and per-bin Python loops, no prefix sums, no
sorting tricks, so that they share no code or idea with the engine beyond the
spec's formulas.
"""

from __future__ import annotations

import math

import numpy as np


def softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def top(P, y):
    P = np.asarray(P, dtype=np.float64)
    pred = np.argmax(P, axis=1)
    conf = P[np.arange(len(P)), pred]
    hit = (pred == np.asarray(y)).astype(float)
    return conf, hit


def _width_bin(value, n_bins):
    edges = np.linspace(0, 1, n_bins + 1)
    for b in range(n_bins):
        if value <= edges[b + 1] or b == n_bins - 1:
            return b
    raise AssertionError


def _binned_gaps(values, targets, assign, n_bins):
    """Per bin: (count, |mean target - mean value|) for the non-empty bins."""
    buckets = {}
    for v, t in zip(values, targets):
        buckets.setdefault(assign(v), []).append((v, t))
    out = []
    for b in sorted(buckets):
        members = buckets[b]
        mean_v = sum(m[0] for m in members) / len(members)
        mean_t = sum(m[1] for m in members) / len(members)
        out.append((len(members), abs(mean_t - mean_v)))
    return out


def ece(P, y, n_bins):
    conf, hit = top(P, y)
    gaps = _binned_gaps(conf, hit, lambda v: _width_bin(v, n_bins), n_bins)
    return sum(c * g for c, g in gaps) / len(conf)


def mce(P, y, n_bins):
    conf, hit = top(P, y)
    return max(g for _, g in _binned_gaps(conf, hit, lambda v: _width_bin(v, n_bins), n_bins))


def mce_signed(P, y, n_bins):
    """Tao et al.'s MCE as docs/metrics.md reads it: the largest (mean conf - mean acc) over the
    non-empty bins, 0 where no bin is overconfident."""
    conf, hit = top(P, y)
    buckets = {}
    for c, h in zip(conf, hit):
        buckets.setdefault(_width_bin(c, n_bins), []).append((c, h))
    largest = 0.0
    for members in buckets.values():
        over = sum(c for c, _ in members) / len(members) - sum(h for _, h in members) / len(members)
        largest = max(largest, over)
    return largest


def cwce(P, y, n_bins):
    P = np.asarray(P, dtype=np.float64)
    n, k = P.shape
    total = 0.0
    for c in range(k):
        targets = [1.0 if label == c else 0.0 for label in y]
        gaps = _binned_gaps(P[:, c], targets, lambda v: _width_bin(v, n_bins), n_bins)
        total += sum(cnt * g for cnt, g in gaps) / n
    return total / k


def equal_mass_edges(values, n_bins):
    """Kumar et al.: midpoints between np.array_split chunks, deduplicated, then 1.0."""
    s = sorted(values)
    parts = min(n_bins, len(s))
    chunks = np.array_split(np.array(s), parts)
    edges = [(chunks[i][-1] + chunks[i + 1][0]) / 2.0 for i in range(parts - 1)]
    edges.append(1.0)
    return sorted(set(edges))


def _mass_bin(value, edges):
    for i, e in enumerate(edges):
        if value <= e:
            return i
    return len(edges) - 1


def ece_em(P, y, n_bins):
    conf, hit = top(P, y)
    edges = equal_mass_edges(conf, n_bins)
    gaps = _binned_gaps(conf, hit, lambda v: _mass_bin(v, edges), n_bins)
    return sum(c * g for c, g in gaps) / len(conf)


def cwce_em(P, y, n_bins):
    P = np.asarray(P, dtype=np.float64)
    n, k = P.shape
    total = 0.0
    for c in range(k):
        targets = [1.0 if label == c else 0.0 for label in y]
        edges = equal_mass_edges(P[:, c], n_bins)
        gaps = _binned_gaps(P[:, c], targets, lambda v: _mass_bin(v, edges), n_bins)
        total += sum(cnt * g for cnt, g in gaps) / n
    return total / k


def adaptive(P, y, n_bins, threshold):
    P = np.asarray(P, dtype=np.float64)
    n, k = P.shape
    total = 0.0
    for c in range(k):
        kept = [(P[i, c], 1.0 if y[i] == c else 0.0) for i in range(n) if P[i, c] > threshold]
        kept.sort(key=lambda pair: pair[0])  # Python's sort is stable
        nk = len(kept)
        if nk == 0:
            continue
        ranges = min(n_bins, nk)
        size = nk // ranges
        ce = 0.0
        for r in range(ranges):
            lo = r * size
            hi = nk if r == ranges - 1 else (r + 1) * size
            members = kept[lo:hi]
            mean_p = sum(m[0] for m in members) / len(members)
            freq = sum(m[1] for m in members) / len(members)
            ce += len(members) / nk * abs(freq - mean_p)
        total += ce
    return total / k


def ks(scores, hits):
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    n = len(scores)
    h = h_tilde = 0.0
    best = 0.0
    for pos, i in enumerate(order):
        h += hits[i] / n
        h_tilde += scores[i] / n
        last_of_tie = pos == n - 1 or scores[order[pos + 1]] != scores[i]
        if last_of_tie:
            best = max(best, abs(h - h_tilde))
    return best


def top2(P, y):
    P = np.asarray(P, dtype=np.float64)
    first = np.argmax(P, axis=1)
    masked = P.copy()
    masked[np.arange(len(P)), first] = -np.inf
    second = np.argmax(masked, axis=1)
    rows = np.arange(len(P))
    return P[rows, first], P[rows, second], first == np.asarray(y), second == np.asarray(y)


def mmce_quadratic(P, y, width=0.4):
    conf, hit = top(P, y)
    d = hit - conf
    n = len(conf)
    total = 0.0
    for i in range(n):
        for j in range(n):
            total += d[i] * d[j] * math.exp(-abs(conf[i] - conf[j]) / width)
    return math.sqrt(total / n**2)


def nll(logits, y):
    z = np.asarray(logits, dtype=np.float64)
    total = 0.0
    for row, label in zip(z, y):
        m = row.max()
        total += -(row[label] - m - math.log(np.exp(row - m).sum()))
    return total / len(z)


def brier(P, y):
    P = np.asarray(P, dtype=np.float64)
    total = 0.0
    for row, label in zip(P, y):
        total += sum((p - (1.0 if c == label else 0.0)) ** 2 for c, p in enumerate(row))
    return total / len(P)


def auroc(pos, neg):
    wins = 0.0
    for a in pos:
        for b in neg:
            wins += 1.0 if a > b else 0.5 if a == b else 0.0
    return wins / (len(pos) * len(neg))


def kdece_mix_n_match(P, y):
    """Mix-n-Match's ``ece_kde_binary`` (top label, order 1), transcribed with KDEpy's FFTKDE."""
    from KDEpy import FFTKDE

    conf, hit = top(P, y)
    n = len(conf)
    x = np.linspace(-0.6, 1.6, num=2**14)

    def mirror(d):
        return np.concatenate((-d[d < 0.5], d, 2.0 - d[d >= 0.5]))

    correct = conf[hit == 1]
    bw = np.std(correct) * (n * 2) ** -0.2
    pp1 = FFTKDE(bw=bw, kernel="triweight").fit(mirror(correct)).evaluate(x)
    pp1[x <= 0] = 0
    pp1[x >= 1] = 0
    pp1 *= 2
    pp2 = FFTKDE(bw=bw, kernel="triweight").fit(mirror(conf)).evaluate(x)
    pp2[x <= 0] = 0
    pp2[x >= 1] = 0
    pp2 *= 2
    perc = np.mean(hit)
    integral = np.zeros_like(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(len(x)):
            if max(pp1[i], pp2[i]) > 1e-6:
                accu = min(perc * pp1[i] / pp2[i], 1.0)
                if not np.isnan(accu):
                    integral[i] = abs(x[i] - accu) * pp2[i]
            elif i > 1:
                integral[i] = integral[i - 1]
    ind = (x >= 0.0) & (x <= 1.0)
    return np.trapezoid(integral[ind], x[ind]) / np.trapezoid(pp2[ind], x[ind])
