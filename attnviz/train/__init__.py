"""Training: the loop (loop), its options (options), what batches are drawn from (feeds),
attention snapshots over training (snapshots) and evaluation (evaluate, sacrebleu).

May import core, decode and data; never analysis, render, app or cli.
"""
