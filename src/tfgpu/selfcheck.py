"""Does training on several replicas give the same result as on one? A tiny, exact check.

A small model takes the same global batches from the same starting weights on one device and on
several replicas; the losses must be finite and agree. ``tfgpu doctor --deep`` runs it in a child
process, ``tfgpu demo`` on the strategy tfgpu picks.
"""

from __future__ import annotations

from typing import Any

GLOBAL_BATCH = 16
STEPS = 4


def _data() -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    return x, y


def _model(keras: Any) -> Any:
    """The same starting weights in every strategy's scope: a seeded Keras initializer draws the
    same values at each call."""
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(1)),
            keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2)),
        ]
    )


def train_losses(strategy: Any) -> list[float]:
    """Per-step losses of a few SGD steps under ``strategy`` from the seeded starting weights."""
    import keras
    import tensorflow as tf

    x, y = _data()
    with strategy.scope():
        model = _model(keras)
        optimizer = keras.optimizers.SGD(0.05)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)

    @tf.function(autograph=False)
    def step(batch: Any) -> Any:
        def replica(inputs: Any, targets: Any) -> Any:
            with tf.GradientTape() as tape:
                errors = tf.square(model(inputs, training=True) - targets)
                per_example = tf.reduce_mean(errors, axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        per_replica = strategy.run(replica, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return [float(step(b)) for b in strategy.experimental_distribute_dataset(dataset)]


def replica_agreement(tf: Any, strategy: Any | None = None) -> dict[str, Any]:
    """Compare ``strategy`` (default: MirroredStrategy on 2 devices) with one device."""
    import numpy as np

    if strategy is None:  # a correctness check: reduce through one device, whatever the devices
        gpus = tf.config.list_logical_devices("GPU")
        pool = gpus if len(gpus) >= 2 else tf.config.list_logical_devices("CPU")
        strategy = tf.distribute.MirroredStrategy(
            [d.name for d in pool[:2]], cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    devices = list(getattr(strategy.extended, "worker_devices", ()))
    single = train_losses(tf.distribute.OneDeviceStrategy(devices[0] if devices else "/cpu:0"))
    replicated = train_losses(strategy)
    finite = bool(np.all(np.isfinite(single)) and np.all(np.isfinite(replicated)))
    return {
        "devices": [d.split("device:")[-1] for d in devices],
        "replicas": int(strategy.num_replicas_in_sync),
        "single": single,
        "replicated": replicated,
        "finite": finite,
        "agree": bool(np.allclose(single, replicated, rtol=1e-4, atol=1e-6)),
    }
