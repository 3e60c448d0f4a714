"""The user's model and where it runs: made or taken (``user_model``), built (``building``), placed
on a strategy (``placement``, moved there by ``rehoming``) or split across devices (``split``), and
proved on its replicas (``proof``).

Imports ``pieces``, ``inputs`` and ``step``; the loops, tuning, the run and the verbs import it.
"""
