"""The compiled step: one call of K steps (``execution``, shared with diagnose and predict) and
what a step holds in device memory (``footprint``).

Imports ``pieces`` only; the model (a split's sizes), the loops and tuning import it.
"""
