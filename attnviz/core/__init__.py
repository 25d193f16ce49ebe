"""The model itself: config, masks, positions, attention (eager + SDPA), the KV cache, the
Transformer, recording and edits, the fused cached step, weight files and their checks.

Imports nothing from the rest of attnviz; everything else builds on it.
"""
