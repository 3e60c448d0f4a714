"""TensorFlow's "Parameter server training with ParameterServerStrategy" tutorial, by ``tfgpu.fit``.

tensorflow/docs ``site/en/tutorials/distribute/parameter_server_training.ipynb``, its
``Model.fit`` section, with the lines a user changes marked ``# tfgpu:``::

    tfgpu launch --ps 1 --nproc 2 -- python examples/tutorials/parameter_server.py OUT

Keras 3's ``model.fit`` has no ParameterServerStrategy support (and Keras 2's
``DatasetCreator`` is gone): ``tfgpu.fit`` takes the tutorial's ``dataset_fn`` as it is. The
worker and ps tasks serve; the chief (the coordinator) trains, with the tutorial's callbacks,
and saves its weights, history and step count to OUT/chief.npz and OUT/chief.json. Changed: the
random data and the shuffle are seeded so that runs can be compared, and the model has one output
(Keras 3 no longer broadcasts the tutorial's labels against ten).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def dataset_fn(input_context):
    import tensorflow as tf

    global_batch_size = 64
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)

    rng = np.random.default_rng(0)  # tfgpu: seeded, for tf.random.uniform
    x = rng.uniform(size=(10, 10)).astype("float32")
    y = rng.uniform(size=(10,)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10, seed=0).repeat()  # tfgpu: seed=0
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    dataset = dataset.batch(batch_size)
    dataset = dataset.prefetch(2)

    return dataset


def build_model():
    import keras

    keras.utils.set_random_seed(0)  # tfgpu: the same initial weights as a comparison run
    # tfgpu: Dense(10) in the tutorial; Keras 3's mse no longer broadcasts labels of shape (batch,)
    # against 10 outputs ("Incompatible shapes: [64] vs. [64,10]", its own fit too)
    model = keras.models.Sequential([keras.Input((10,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(), loss="mse", steps_per_execution=10)
    return model


def main(out: str) -> None:
    import keras
    import tensorflow as tf

    import tfgpu

    cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if cluster_resolver.task_type in ("worker", "ps"):
        # Start a TensorFlow server and wait.
        os.environ["GRPC_FAIL_FAST"] = "use_caller"
        server = tf.distribute.Server(
            cluster_resolver.cluster_spec(),
            job_name=cluster_resolver.task_type,
            task_index=cluster_resolver.task_id,
            protocol=cluster_resolver.rpc_layer or "grpc",
            start=True,
        )
        server.join()

    strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
    with strategy.scope():
        model = build_model()

    working_dir = out
    log_dir = os.path.join(working_dir, "log")
    ckpt_filepath = os.path.join(working_dir, "ckpt.keras")  # tfgpu: Keras 3 saves .keras files
    backup_dir = os.path.join(working_dir, "backup")

    callbacks = [
        keras.callbacks.TensorBoard(log_dir=log_dir),
        keras.callbacks.ModelCheckpoint(filepath=ckpt_filepath),
        keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
    ]

    history = tfgpu.fit(  # tfgpu: model.fit(dc, ...), where dc = DatasetCreator(dataset_fn)
        model, dataset_fn, epochs=5, steps_per_epoch=20, callbacks=callbacks, verbose=0
    )
    np.savez(os.path.join(out, "chief.npz"), *model.get_weights())
    with open(os.path.join(out, "chief.json"), "w") as handle:
        json.dump({"history": history.history, "iterations": int(model.optimizer.iterations.numpy())}, handle)


if __name__ == "__main__":
    main(sys.argv[1])
