"""tfgpu data-service (issue 19, first part): a dispatcher and worker processes on localhost."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from conftest import run_cli
from tfgpu.data.service import reachable
from tfgpu.errors import InputError


@pytest.fixture(scope="module")
def service():
    process = subprocess.Popen(
        [sys.executable, "-m", "tfgpu.cli", "data-service", "--workers", "2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    text = ""
    while not text.rstrip().endswith("}"):  # one JSON object, printed once serving
        line = process.stdout.readline()
        assert line, process.stderr.read()[-2000:]
        text += line
    started = json.loads(text)
    yield {"process": process, **started}
    if process.poll() is None:
        process.kill()
        process.wait()


def rows_through(address: str, mode, job: str) -> list[int]:
    dataset = tf.data.Dataset.range(200).map(lambda x: x * 3)
    distributed = dataset.apply(
        tf.data.experimental.service.distribute(processing_mode=mode, service=address, job_name=job)
    )
    return sorted(int(v) for v in distributed.as_numpy_iterator())


def test_every_row_once_through_two_workers(service):
    local = [3 * i for i in range(200)]
    assert service["address"].startswith("grpc://localhost:") and len(service["worker_ports"]) == 2
    # dynamic sharding (distributed_epoch) and static sharding (fixed worker addresses): every row once
    assert rows_through(service["address"], "distributed_epoch", "dynamic") == local
    static = tf.data.experimental.service.ShardingPolicy.DATA
    assert rows_through(service["address"], static, "static") == local


def test_tfgpu_pipeline_through_the_service(service, tmp_path):
    """Reading and parsing on the service's workers, batching here: the rows of the local pipeline."""
    import numpy as np

    from tfgpu import data

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(301, 4)).astype("float32"), y=rng.integers(0, 3, 301))
    options = data.ConvertOptions(label="y", min_shards=6, workers=1)
    data.convert(tmp_path / "d.npz", tmp_path / "ds", options=options)

    def ids(**kw):
        batches = data.pipeline(tmp_path / "ds", batch_size=16, with_ids=True, **kw)
        return [int(i) for b in batches for i in b["id"].numpy()]

    local = ids()
    assert sorted(ids(service=service["address"])) == sorted(local) == list(range(301))  # exactly once
    trained = ids(service=service["address"], training=True)  # dynamic sharding, remainder dropped
    assert len(trained) == 301 // 16 * 16 and len(set(trained)) == len(trained)
    with pytest.raises(InputError, match=r"No tf\.data service dispatcher answers"):
        data.pipeline(tmp_path / "ds", batch_size=16, service="grpc://localhost:1")


def test_the_service_stops_cleanly_with_its_workers(service):
    process = service["process"]
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    for port in service["worker_ports"]:  # the workers are gone with it
        deadline = time.time() + 10
        while time.time() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("localhost", port)) != 0:
                    break
            time.sleep(0.2)
        else:
            pytest.fail(f"worker port {port} still answers")
    assert "Traceback" not in process.stderr.read()


def test_bad_addresses_and_ports():
    with socket.socket() as busy:
        busy.bind(("localhost", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_cli("data-service", "--port", str(port))
        assert done.returncode == 2 and f"Port {port} is already in use" in done.stderr
        assert "Traceback" not in done.stderr
    with pytest.raises(InputError, match=r"No tf\.data service dispatcher answers at grpc://localhost:"):
        reachable(f"grpc://localhost:{port}", timeout_s=2)
    with pytest.raises(InputError, match="grpc://HOST:PORT"):
        reachable("localhost")


def test_trainer_through_the_service_reaches_the_same_weights(tmp_path):
    """One service worker, exactly once, no shuffle (the order fixed): under MirroredStrategy on
    2 logical CPU devices the Trainer reaches the weights it reaches reading locally."""
    import dataclasses

    import numpy as np

    import tfgpu
    from tasks import arrays, make_task
    from tfgpu import data
    from tfgpu.data.service import DataService, ServiceOptions

    x, y = arrays()
    np.savez(tmp_path / "d.npz", x=x, y=y)
    data.convert(
        tmp_path / "d.npz", tmp_path / "ds", options=data.ConvertOptions(label="y", min_shards=4, workers=1)
    )
    fixed = {"shuffle_files": False, "shuffle_buffer": 1}
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )

    def weights(pipeline):
        task = dataclasses.replace(
            make_task(12), train_data=str(tmp_path / "ds"), eval_data=None, pipeline=pipeline
        )
        trainer = tfgpu.Trainer(task, strategy=strategy, monitor_gpus=False)
        trainer.fit(epochs=1)
        return trainer.model.get_weights()

    local = weights(fixed)
    with DataService(ServiceOptions(workers=1)) as service:
        served = weights({**fixed, "service": service.address, "exactly_once": True})
    for a, b in zip(local, served, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_worker_that_dies_stops_the_service():
    from tfgpu.data.service import DataService, ServiceOptions

    with DataService(ServiceOptions(workers=1)) as service:
        service._workers[0].kill()
        assert service.wait(poll_s=0.05) == 1 and service.failed_worker()[0] == 0
