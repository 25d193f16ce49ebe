"""Analysis on top of recorded traces: head statistics, health checks, ablation, mask
experiments and attribution. Plain Python (no UI imports): usable from notebooks, the CLI
and the app alike."""

from .stats import METRICS, HeadStats, head_stats, matrix_stats, role_of

__all__ = ["METRICS", "HeadStats", "head_stats", "matrix_stats", "role_of"]
