"""A tfgpu.fit run for the kill-and-resume test: python fit_resume.py CHECKPOINT_DIR SLOW_S.

Each execution's batch callback sleeps SLOW_S, so a kill can land mid-run; the final weights go
to CHECKPOINT_DIR/final.weights.h5.
"""

import sys
import time
from pathlib import Path

import keras

import tfgpu
from fit_models import binary_data, binary_model

directory, slow = sys.argv[1], float(sys.argv[2])
x, y = binary_data()
model = binary_model()
history = tfgpu.fit(
    model,
    x,
    y,
    batch_size=48,
    epochs=3,
    verbose=0,
    checkpoint_dir=directory,
    checkpoint_every=4,
    steps_per_execution=2,
    callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(slow))],
)
model.save_weights(str(Path(directory) / "final.weights.h5"))
print("epochs", history.epoch, flush=True)
