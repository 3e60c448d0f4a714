"""What the tests share, so that no test file imports another (issue 77).

- ``parity``: the one comparator (``same``) of a tfgpu run against Keras's, and the two ways an
  example runs (Keras's own methods, tfgpu's);
- ``examples``: the registry of examples (each parity test's source and what it exercises, the
  behaviour files, ``--exercising``);
- ``replicas``: the logical CPU devices a test process runs on, and a strategy over them;
- ``processes``: the tfgpu command as a user runs it, and the environment a child process gets;
- ``source``: the package's modules read as text (the layering, shape and walker tests).

Nothing here imports TensorFlow at import time except ``parity`` (its runs call Keras and tfgpu):
a test that builds no model can import the rest without paying for TensorFlow.
"""
