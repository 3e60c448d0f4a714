"""``tfgpu.strategy()`` (module ``tfgpu.distribute``): the right tf.distribute strategy for this process, chosen by rules.

The rules, in order (a name passed in, or TFGPU_STRATEGY, forces one):

1. TF_CONFIG with a "ps" task -> ParameterServerStrategy (the chief coordinates; workers and ps
   tasks serve the cluster);
2. TF_CONFIG with several tasks -> MultiWorkerMirroredStrategy, created before any other op;
3. more than one GPU -> MirroredStrategy over them;
4. one GPU -> OneDeviceStrategy on it;
5. several logical CPU devices -> MirroredStrategy over them;
6. otherwise the CPU (OneDeviceStrategy on CPU:0).

``choose`` is pure (it is the rule table), ``strategy`` looks at this process and builds the result.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfgpu import choices, cluster, env
from tfgpu.errors import ConfigError, TfgpuError

log = logging.getLogger(__name__)

NAMES = ("auto", "default", "one-device", "mirrored", "multi-worker", "parameter-server")
DISPLAY = {
    "default": "DefaultStrategy",
    "one-device": "OneDeviceStrategy",
    "mirrored": "MirroredStrategy",
    "multi-worker": "MultiWorkerMirroredStrategy",
    "parameter-server": "ParameterServerStrategy",
}


@dataclass(frozen=True)
class StrategyChoice:
    """What ``choose`` decided: the kind, the devices (for local strategies) and why."""

    kind: str  # one of NAMES except auto
    devices: tuple[str, ...]
    reason: str


def choose(
    *,
    name: str | None,
    spec: cluster.ClusterSpec | None,
    gpus: int,
    logical_cpus: int,
) -> StrategyChoice:
    """The rule table: which strategy for this name, cluster and device count."""
    name = (name or "auto").strip().lower()
    if name not in NAMES:
        raise ConfigError("Unknown strategy name", value=name, fix=f"use one of: {', '.join(NAMES)}")
    gpu_devices = tuple(f"/gpu:{i}" for i in range(gpus))
    cpu_devices = tuple(f"/cpu:{i}" for i in range(logical_cpus))
    local = gpu_devices or cpu_devices
    if name in ("multi-worker", "parameter-server") and spec is None:
        raise ConfigError(
            f"Strategy {name!r} needs a cluster, but TF_CONFIG is not set",
            value=name,
            fix="run under `tfgpu launch`, or set TF_CONFIG",
        )
    if name == "parameter-server" or (name == "auto" and spec is not None and spec.has_ps):
        if spec is None or not spec.has_ps:
            raise ConfigError(
                "Strategy 'parameter-server' needs 'ps' tasks in TF_CONFIG",
                value=None if spec is None else sorted(spec.cluster),
                fix="add a 'ps' role to the cluster, or let tfgpu choose",
            )
        return StrategyChoice("parameter-server", (), f"TF_CONFIG has {len(spec.cluster['ps'])} ps task(s)")
    if name == "multi-worker" or (name == "auto" and spec is not None and spec.num_tasks > 1):
        assert spec is not None
        return StrategyChoice("multi-worker", (), f"TF_CONFIG has {spec.num_tasks} tasks")
    if name == "mirrored" or (name == "auto" and len(local) > 1):
        kind = "GPUs" if gpu_devices else "logical CPU devices"
        return StrategyChoice("mirrored", local, f"{len(local)} {kind}")
    if name == "default":
        return StrategyChoice("default", (), "asked for")
    if gpu_devices:
        return StrategyChoice("one-device", gpu_devices[:1], "one GPU")
    return StrategyChoice("one-device", ("/cpu:0",), "no GPU")


def local_device_counts() -> tuple[int, int]:
    """(GPUs, logical CPU devices) TensorFlow will give this process, without initializing it."""
    import tensorflow as tf

    gpus = 0
    for gpu in tf.config.get_visible_devices("GPU"):
        logical = tf.config.get_logical_device_configuration(gpu)
        gpus += len(logical) if logical else 1
    cpu = tf.config.list_physical_devices("CPU")[0]
    logical_cpus = len(tf.config.get_logical_device_configuration(cpu) or [None])
    return gpus, logical_cpus


def strategy(
    name: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    serve: bool = True,
) -> Any:
    """Create the tf.distribute strategy for this process and record the choice.

    ``name`` forces a kind (see NAMES); otherwise TFGPU_STRATEGY, otherwise the rules above.
    On a worker or ps task of a parameter-server cluster there is nothing to drive: with
    ``serve=True`` (the default) this call runs the task's server and does not return.
    """
    environ = os.environ if environ is None else environ
    spec = cluster.from_environ(environ)
    name = name or env.strategy_name(environ)
    if spec is not None and spec.num_tasks > 1:
        gpus, logical_cpus = 0, 1  # a cluster decides before anything touches the devices
    else:
        gpus, logical_cpus = local_device_counts()
    picked = choose(name=name, spec=spec, gpus=gpus, logical_cpus=logical_cpus)
    built = _build(picked, spec, serve=serve)
    description = DISPLAY[picked.kind]
    replicas = getattr(built, "num_replicas_in_sync", None)
    if picked.kind != "parameter-server" and replicas is not None:
        description += f" x{replicas}"
    choices.record("strategy", description, picked.reason)
    return built


def prepare_multi_worker(environ: Mapping[str, str] | None = None) -> bool:
    """Set this process up as its task of a multi-worker cluster before TensorFlow's first op, as
    MultiWorkerMirroredStrategy will; ``import tfgpu`` calls it. Returns whether it did.

    Why: the strategy configures collective ops, which TensorFlow accepts only before its first op
    ("Collective ops must be configured at program startup"), and it starts the task's server, after
    which tensors made earlier fail ("Haven't set up remote eager worker"). Scripts as their authors
    wrote them (keras-io's) build their data and model first and reach ``tfgpu.fit`` later: under
    ``tfgpu launch`` they failed. Done here, the context starts as the cluster's task, so what the
    script builds first stays usable once the strategy is made. Nothing is done (and TensorFlow is
    not imported) without a TF_CONFIG that tfgpu trains on with MultiWorkerMirroredStrategy, nor
    once TensorFlow has run an op, nor for a task outside the all-reduce (ps, evaluator).
    """
    environ = os.environ if environ is None else environ
    try:
        spec = cluster.from_environ(environ)
        if spec is None or spec.task_type not in ("chief", "worker"):
            return False
        kind = choose(name=env.strategy_name(environ), spec=spec, gpus=0, logical_cpus=1).kind
    except TfgpuError:
        return False  # a malformed TF_CONFIG or strategy name: tfgpu.strategy() reports it
    if kind != "multi-worker":
        return False
    from tensorflow.python.eager import context

    if context.context()._context_handle is not None:  # TensorFlow has run an op
        return False
    from tfgpu import runtime

    try:  # the devices start with the task: the environment's device settings go first
        runtime.seal(
            f"import tfgpu set this process up as {spec.task_type} {spec.task_index} of its "
            "cluster (TF_CONFIG)",
            environ,
        )
    except TfgpuError as error:
        log.warning("%s", error)
    try:
        _configure_task(context.context(), spec, rpc_layer=_rpc_layer(environ))
    except Exception as error:  # a TensorFlow that moved what this follows: the strategy's own path
        log.warning(
            "could not set this process up as %s %d of its cluster: %s",
            spec.task_type,
            spec.task_index,
            error,
        )
        return False
    return True


def _rpc_layer(environ: Mapping[str, str]) -> str:
    try:
        return str(json.loads(environ["TF_CONFIG"]).get("rpc_layer") or "grpc")
    except (KeyError, ValueError, AttributeError):
        return "grpc"


def _configure_task(context: Any, spec: cluster.ClusterSpec, *, rpc_layer: str) -> None:
    """What MultiWorkerMirroredStrategy's ``_initialize_multi_worker`` does before its context
    starts (tensorflow/python/distribute/collective_all_reduce_strategy.py): the same collective
    settings (so its own call finds them set and returns), the coordination service, and the
    task's server. The coordination proto is taken from the strategy's own module: TF 2.15 (the
    Estimator lane) keeps it elsewhere than 2.21. tests/test_fit.py checks that TensorFlow still
    has each function used."""
    from tensorflow.core.protobuf import tensorflow_server_pb2
    from tensorflow.python.distribute import collective_all_reduce_strategy as strategy_module
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.training import server_lib

    tf_spec = server_lib.ClusterSpec(spec.cluster)
    task = f"/job:{spec.task_type}/task:{spec.task_index}"
    context.configure_collective_ops(
        collective_leader=multi_worker_util.collective_leader(tf_spec, spec.task_type, spec.task_index),
        scoped_allocator_enabled_ops=("CollectiveReduce",),
        device_filters=(task,),
    )
    jobs = [
        strategy_module.coordination_config_pb2.CoordinatedJob(name=job, num_tasks=tf_spec.num_tasks(job))
        for job in ("chief", "worker")
        if job in tf_spec.jobs
    ]
    context.configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(tf_spec),
        coordinated_jobs=jobs,
    )
    enable = context.enable_collective_ops
    ours = tensorflow_server_pb2.ServerDef(
        cluster=tf_spec.as_cluster_def(),
        default_session_config=context.config,
        job_name=spec.task_type,
        task_index=spec.task_index,
        protocol=rpc_layer,
        port=0,
    )
    enable(ours)

    def enable_once(server_def: Any) -> None:
        """The strategy enables its server again once the context has started (after the data
        and model were built): that restarts the task's server under the coordination service,
        and 2 of 3 runs of keras-io's weather example hung in the first broadcast. A started
        context already runs this task's server: the same task's call is skipped, any other
        (another cluster, DTensor's) goes through."""
        same = (server_def.cluster, server_def.job_name, server_def.task_index) == (
            ours.cluster,
            ours.job_name,
            ours.task_index,
        )
        if context._context_handle is None or not same:
            enable(server_def)

    context.enable_collective_ops = enable_once


_BUILT: dict[tuple[Any, ...], Any] = {}  # (kind, devices, cluster) -> the strategy made for it


def _build(picked: StrategyChoice, spec: cluster.ClusterSpec | None, *, serve: bool) -> Any:
    """The strategy ``picked`` names, made once per process and reused.

    A second MirroredStrategy over the same devices allocates collective keys of its own: a model
    re-created and traced under a new one each ``tfgpu.fit`` call failed with "Shape mismatch in
    the collective instance" once its trainable set changed; and MultiWorkerMirroredStrategy can
    only be made once per process.
    """
    import tensorflow as tf

    if picked.kind == "parameter-server":
        assert spec is not None
        if spec.task_type in ("worker", "ps"):
            return _parameter_server(tf, spec, serve=serve)
    key = (
        picked.kind,
        picked.devices,
        None if spec is None else (json.dumps(spec.cluster, sort_keys=True), spec.task_type, spec.task_index),
    )
    if key not in _BUILT:
        _BUILT[key] = _make(tf, picked, spec, serve=serve)
    return _BUILT[key]


def _make(tf: Any, picked: StrategyChoice, spec: cluster.ClusterSpec | None, *, serve: bool) -> Any:
    if picked.kind == "parameter-server":
        assert spec is not None
        return _parameter_server(tf, spec, serve=serve)
    if picked.kind == "multi-worker":
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as error:
            if "program startup" not in str(error):
                raise
            raise ConfigError(
                "MultiWorkerMirroredStrategy must be made before TensorFlow's first op, and "
                "TensorFlow has already run one in this process",
                value=str(error),
                fix="set TF_CONFIG before the script starts and put `import tfgpu` above anything "
                "that runs TensorFlow (building a dataset or a model): tfgpu then sets the worker "
                "up; or call tfgpu.strategy() first thing",
            ) from None
    if picked.kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices=list(picked.devices) or None)
    if picked.kind == "default":
        return tf.distribute.get_strategy()
    return tf.distribute.OneDeviceStrategy(picked.devices[0])


def _parameter_server(tf: Any, spec: cluster.ClusterSpec, *, serve: bool) -> Any:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if spec.task_type in ("worker", "ps"):
        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=spec.task_type,
            task_index=spec.task_index,
            protocol=resolver.rpc_layer or "grpc",
            start=True,
        )
        log.info("serving as %s %d of a parameter-server cluster", spec.task_type, spec.task_index)
        if serve:
            server.join()
        return server
    return tf.distribute.ParameterServerStrategy(resolver)


def local_strategy(*, record_as: str = "strategy") -> Any:
    """The strategy over this process's own devices only, whatever TF_CONFIG says.

    For work that needs no cross-worker collectives (prediction): each worker replicates over its
    GPUs or logical CPU devices and takes its own part of the input.
    """
    gpus, logical_cpus = local_device_counts()
    picked = choose(name=None, spec=None, gpus=gpus, logical_cpus=logical_cpus)
    built = _build(picked, None, serve=False)
    choices.record(record_as, f"{DISPLAY[picked.kind]} x{built.num_replicas_in_sync}", picked.reason)
    return built


def is_parameter_server(strategy: Any) -> bool:
    """True for ParameterServerStrategy: the chief schedules steps on workers (a coordinator)."""
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.ParameterServerStrategy)


def spans_workers(strategy: Any) -> bool:
    """True when the strategy's replicas live in several processes (MultiWorkerMirrored or
    parameter servers): work that has no cross-process collectives must not run under it."""
    import tensorflow as tf

    return is_parameter_server(strategy) or isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def collective_workers(strategy: Any) -> bool:
    """True when several workers' replicas run each step together in one collective group
    (MultiWorkerMirrored, not parameter servers): what every worker must do in step, they
    agree on inside the step's graph."""
    return spans_workers(strategy) and not is_parameter_server(strategy)


def mean_over_replicas(strategy: Any, value: Any) -> Any:
    """The mean of ``value`` (this process's figure) over every replica of every worker: with the
    same count of replicas on each worker, the mean of the workers' figures. A collective: every
    worker must call it."""
    import tensorflow as tf

    on_replicas = strategy.experimental_distribute_values_from_function(lambda _: tf.identity(value))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, on_replicas, axis=None)


def barrier(strategy: Any) -> None:
    """Wait until every worker of a multi-worker strategy reaches this point (a one-number
    all-reduce); a no-op elsewhere. Why: a worker's own file writes are not collective, so the
    chief must not remove what a slower worker is still writing."""
    if not spans_workers(strategy) or is_parameter_server(strategy):
        return
    import tensorflow as tf

    mean_over_replicas(strategy, tf.constant(1.0))


def cluster_of(strategy: Any) -> cluster.ClusterSpec | None:
    """The cluster ``strategy`` runs on, read from the strategy's own cluster resolver.

    TF_CONFIG is one way to describe a cluster; TensorFlow's parameter-server tutorial uses a
    ``SimpleClusterResolver`` over in-process servers, and schedulers bring resolvers of their
    own. Reading TF_CONFIG there found none (``'NoneType' object has no attribute 'cluster'``).
    A coordinator whose resolver names no task of its own is the chief. Without a multi-worker
    strategy: TF_CONFIG's cluster, or None.
    """
    resolver = getattr(strategy, "cluster_resolver", None) if spans_workers(strategy) else None
    jobs = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not jobs:
        return cluster.from_environ()
    roles = {
        role: tuple(tasks.values()) if isinstance(tasks, dict) else tuple(tasks)
        for role, tasks in jobs.items()
    }
    task_type = resolver.task_type or "chief"
    return cluster.ClusterSpec(cluster=roles, task_type=task_type, task_index=int(resolver.task_id or 0))


def local_devices(kind: str) -> list[str]:
    """This process's logical devices of ``kind`` ("GPU" or "CPU"), by name.

    Why not ``tf.config.list_logical_devices`` alone: in a cluster (a TF_CONFIG that ``import
    tfgpu`` set the task up for, or a MultiWorkerMirroredStrategy made) TensorFlow lists every
    task's devices. On an H100 under ``tfgpu launch --procs-per-gpu 2`` each process listed 2 GPUs,
    its own and the other task's; a split or a memory figure must use its own only.
    """
    import tensorflow as tf
    from tensorflow.python.eager import context

    host = tf.DeviceSpec.from_string(context.context().host_address_space())
    mine = []
    for device in tf.config.list_logical_devices(kind):
        spec = tf.DeviceSpec.from_string(device.name)
        if spec.job is None or (spec.job, spec.replica or 0, spec.task or 0) == (
            host.job,
            host.replica or 0,
            host.task or 0,
        ):
            mine.append(device.name)
    return mine


def replica_devices(strategy: Any) -> tuple[tuple[str, ...], bool]:
    """(the devices the replicas run on, whether the strategy is TensorFlow's default one).

    The default strategy has no ``worker_devices`` (it raises): its one replica runs on the
    default device, the first GPU if there is one.
    """
    try:
        return tuple(strategy.extended.worker_devices), False
    except (RuntimeError, AttributeError, NotImplementedError):
        gpus = local_devices("GPU")
        return ((gpus[0] if gpus else "/device:CPU:0"),), True


def on_host_cpu(devices: tuple[str, ...]) -> bool:
    """True when every replica runs on a CPU device: input needs no copy to the device there."""
    return all("CPU" in d.upper() for d in devices)


def input_strategy(strategy: Any, *, in_cluster: bool = False) -> Any | None:
    """The strategy whose distributed iterator feeds ``strategy``'s replicas; None: iterate the
    dataset as it is.

    One replica on the host CPU outside a cluster needs no copy to a device, and the distributed
    iterator's bookkeeping measured about 20% of a small step there. Elsewhere the distributed
    iterator fetches each batch to its device ahead of the step; TensorFlow's default strategy
    does not, so a OneDeviceStrategy on its device feeds it.
    """
    import tensorflow as tf

    devices, default = replica_devices(strategy)
    if int(strategy.num_replicas_in_sync) == 1 and not in_cluster and on_host_cpu(devices):
        return None
    return tf.distribute.OneDeviceStrategy(devices[0]) if default else strategy
