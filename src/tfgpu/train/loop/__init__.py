"""A run over its setup: the setup (``setup``), the training loop (``training``) and the
parameter-server loop (``ps_loop``), evaluation, the windows the loops record, and what a run
reports (``result``).

Imports the rooms below it (``pieces``, ``inputs``, ``step``, ``model``); tuning, the run and the
verbs import it.
"""
