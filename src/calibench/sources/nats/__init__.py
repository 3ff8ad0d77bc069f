"""NATS-Bench (Dong et al., TPAMI 2021) as a population source: its archives, architecture
strings, isomorphism classes, networks, the embedded mini benchmark and the jobs that write
its population, labels and logits (docs/nats-bench.md). The analyses that only make sense for
it are downstream, in :mod:`calibench.analysis.nats`; the Tao et al. exchange format is in
:mod:`calibench.results.interop`."""
