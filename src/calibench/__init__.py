"""calibench: calibration of whole populations of neural architectures (NATS-Bench).

The numeric core lives in :mod:`calibench.metrics` (calibration metrics, see
``docs/metrics.md``) and :mod:`calibench.measure.stages` (split and temperature scaling).
"""

__version__ = "0.1.0"
