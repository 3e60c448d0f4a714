"""What a run is asked and keeps, and the small pieces every part of training uses: the options,
the Task, callbacks, checkpoints, stopping on a signal, per-model facts (``model_cache``), Keras
layers and losses tfgpu reads, gradient accumulation, remat, and what a tuning found (``tuned``).

The lowest room of ``tfgpu.train``: it imports nothing else of it; every other room may import it.
"""
