"""Decoding a model: the greedy stepper and loops (greedy), beam search (beam, its logits
rules in rules, its tree in tree) and scoring a reference (scoring).

May import core and data (batches, tokenizers); never analysis, render, app or cli.
"""
