"""Population sources: where the networks of a population and their logits come from.

Everything after the logits store (recalibration, metrics, shards, tables, analysis,
report, queries) is shared by every source. A source supplies three things for a
population: its members and their chunks (the population document), each member's
logits on each dataset into the store (the inference job), and each dataset's labels.

* ``nats`` (:mod:`calibench.sources.nats`): NATS-Bench TSS and SSS from their archives.
* ``logits`` (:mod:`calibench.sources.logits_dir`): a directory of per-model logits.
* ``torch`` (:mod:`calibench.sources.torch_models`): torch models named by callables.
"""
