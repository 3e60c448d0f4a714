"""The Trainer: a Task's run from its setup through tuning and the loop to its result, and the
largest batch that fits (``batch_size``).

Imports every room below it; the verbs (``keras_fit``) and the package's public names import it.
"""
