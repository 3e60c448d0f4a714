"""The data: one door for what the verbs take (``adapters``: arrays, Datasets, PyDatasets,
generators, dataset directories, input functions, each decided once), and the reader of each kind
that feeds the replicas (``readers``).

Imports ``pieces`` only; the model, the step and the loops import it.
"""
