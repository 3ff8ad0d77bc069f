"""NATS-Bench (Dong et al., TPAMI 2021) as a population source: its archives, architecture
strings, isomorphism classes, networks, the embedded mini benchmark, and the analyses that
only make sense for it (architecture search, training schedules, Q2 robustness, Q7
architecture figures, the Tao et al. exchange format)."""
