"""tfgpu launch on Kubernetes: the cluster from an Indexed Job's or a JobSet's pod environment.

Every pod of a job is simulated by the environment Kubernetes gives it (JOB_COMPLETION_INDEX and
the pod's host name, set by the Job controller) and the labels JobSet puts on it (the Downward
API's ``labels`` file): all pods must build one TF_CONFIG cluster, each with its own task. The
processes tests run those pods as local processes, their host names mapped to this machine with
TFGPU_HOST_MAP, and compare the weights with one process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tfgpu import nvml
from tfgpu.errors import ClusterError, ConfigError
from tfgpu.launch import LaunchConfig, kubernetes, manifest, peers
from tfgpu.launch.plan import make_plan
from tfgpu.testing.fake_nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
DOMAIN = "default.svc.cluster.local"


def gpus(count):
    return nvml.probe(FakeNvml([FakeGpu("h100") for _ in range(count)])).gpus if count else []


def no_ports(n):
    raise AssertionError("a pod's cluster uses --port, not free local ports")


def indexed_pod(index, *, job="train", service="train"):
    environ = {"JOB_COMPLETION_INDEX": str(index), "HOSTNAME": f"{job}-{index}"}
    return environ, f"{job}-{index}.{service}.{DOMAIN}"


def jobset_labels(name, replicated, index, *, replicas, total, attempt=0):
    """The labels the JobSet controller puts on a pod (jobset_types.go's keys)."""
    return {
        kubernetes.JOBSET: name,
        kubernetes.REPLICATED_JOB: replicated,
        kubernetes.REPLICAS: str(replicas),
        kubernetes.JOB_INDEX: str(index),
        kubernetes.GLOBAL_REPLICAS: str(total),
        kubernetes.RESTART_ATTEMPT: str(attempt),
        "batch.kubernetes.io/job-completion-index": "0",
    }


def jobset_pod(name, replicated, index, **kw):
    environ = {"JOB_COMPLETION_INDEX": "0", "HOSTNAME": f"{name}-{replicated}-{index}-0"}
    return (
        environ,
        jobset_labels(name, replicated, index, **kw),
        f"{name}-{replicated}-{index}-0.{name}.{DOMAIN}",
    )


def plan_pod(environ, labels, fqdn, *, gpu_count=0, **config):
    config = LaunchConfig(command=(PY, "train.py"), **config)
    pod = kubernetes.pod_layout(
        environ, labels, fqdn, nnodes=config.nnodes, ps=config.ps, subdomain=config.subdomain
    )
    return make_plan(config, inventory=gpus(gpu_count), environ=environ, free_ports=no_ports, pod=pod)


def tasks(plan):
    return [(p.role, p.index) for p in plan.local]


def one_cluster(plans):
    clusters = {json.dumps(json.loads(p.env["TF_CONFIG"])["cluster"]) for plan in plans for p in plan.local}
    assert len(clusters) == 1, clusters
    every = [t for plan in plans for t in tasks(plan)]
    assert len(every) == len(set(every)), every  # each task runs on exactly one pod
    return json.loads(clusters.pop())


@pytest.mark.parametrize("pods", [2, 3])
def test_every_pod_of_an_indexed_job_builds_one_cluster(pods):
    plans = []
    for i in range(pods):
        environ, fqdn = indexed_pod(i)
        plans.append(plan_pod(environ, {}, fqdn, gpu_count=2, nnodes=pods))
    cluster = one_cluster(plans)
    assert cluster == {
        "worker": [f"train-{i}.train.{DOMAIN}:{23456 + s}" for i in range(pods) for s in range(2)]
    }
    for i, plan in enumerate(plans):
        assert plan.source == "indexed-job"
        assert tasks(plan) == [("worker", 2 * i), ("worker", 2 * i + 1)]
        assert [p.gpus for p in plan.local] == [(0,), (1,)]  # one worker per GPU of the pod
        assert plan.rendezvous == f"train-{i}.train.{DOMAIN}:23456"
        assert [name for name, _ in plan.peers] == [
            f"train-{j}.train.{DOMAIN}" for j in range(pods) if j != i
        ]


def test_an_indexed_job_with_parameter_servers_runs_them_on_pod_0():
    plans = []
    for i in range(2):
        environ, fqdn = indexed_pod(i)
        plans.append(plan_pod(environ, {}, fqdn, nnodes=2, nproc=1, ps=1))
    cluster = one_cluster(plans)
    assert set(cluster) == {"chief", "worker", "ps"} and len(cluster["worker"]) == 2
    assert tasks(plans[0]) == [("chief", 0), ("worker", 0), ("ps", 0)]
    assert tasks(plans[1]) == [("worker", 1)]


def test_every_pod_of_a_jobset_with_workers_and_parameter_servers_builds_one_cluster():
    pods = [jobset_pod("js", "worker", i, replicas=2, total=4) for i in range(2)]
    pods += [jobset_pod("js", "ps", i, replicas=2, total=4) for i in range(2)]
    plans = [plan_pod(*pod, gpu_count=1, nproc=1) for pod in pods]
    cluster = one_cluster(plans)
    assert cluster == {
        "chief": [f"js-worker-0-0.js.{DOMAIN}:23456"],  # the coordinator, on worker pod 0, no GPU
        "worker": [f"js-worker-0-0.js.{DOMAIN}:23457", f"js-worker-1-0.js.{DOMAIN}:23456"],
        "ps": [f"js-ps-0-0.js.{DOMAIN}:23456", f"js-ps-1-0.js.{DOMAIN}:23456"],
    }
    assert [tasks(p) for p in plans] == [
        [("chief", 0), ("worker", 0)],
        [("worker", 1)],
        [("ps", 0)],
        [("ps", 1)],
    ]
    assert {p.source for p in plans} == {"jobset"}
    assert plans[0].local[1].gpus == (0,) and plans[0].local[0].gpus == ()
    assert len({p.rendezvous for p in plans}) == 4 and all(len(p.peers) == 3 for p in plans)


def test_a_jobset_of_workers_only_is_multi_worker_mirrored():
    plans = [plan_pod(*jobset_pod("mw", "worker", i, replicas=3, total=3), gpu_count=2) for i in range(3)]
    cluster = one_cluster(plans)
    assert list(cluster) == ["worker"] and len(cluster["worker"]) == 6
    assert tasks(plans[2]) == [("worker", 4), ("worker", 5)]


def test_a_jobset_restart_is_the_programs_launch_attempt():
    plan = plan_pod(*jobset_pod("js", "worker", 0, replicas=1, total=1, attempt=3))
    assert plan.first_attempt == 3 and plan.to_dict()["attempt"] == 3


def test_the_downward_api_labels_file_is_read():
    text = 'batch.kubernetes.io/job-completion-index="1"\njobset.sigs.k8s.io/jobset-name="js"\napp="a\\"b"\n'
    assert kubernetes.read_labels(text) == {
        "batch.kubernetes.io/job-completion-index": "1",
        kubernetes.JOBSET: "js",
        "app": 'a"b',
    }


def test_the_labels_file_and_the_host_map_come_from_the_environment(tmp_path):
    labels = jobset_labels("js", "worker", 1, replicas=2, total=2)
    (tmp_path / "labels").write_text("".join(f'{k}="{v}"\n' for k, v in labels.items()))
    environ = {
        "TFGPU_PODINFO": str(tmp_path),
        "HOSTNAME": "js-worker-1-0",
        "TFGPU_HOST_MAP": json.dumps(
            {"js-worker-0-0.js": "127.0.0.1:41000", "js-worker-1-0.js": "127.0.0.1:41010"}
        ),
    }
    pod = kubernetes.detect(environ, subdomain="js")
    assert pod == kubernetes.PodLayout(
        source="jobset", workers=("js-worker-0-0.js", "js-worker-1-0.js"), ps=(), role="worker", index=1
    )
    config = LaunchConfig(command=(PY, "train.py"), nproc=2)
    plan = make_plan(config, inventory=[], environ=environ, free_ports=no_ports, pod=pod)
    assert plan.cluster == {
        "worker": ["127.0.0.1:41000", "127.0.0.1:41001", "127.0.0.1:41010", "127.0.0.1:41011"]
    }
    assert plan.rendezvous == "127.0.0.1:41010" and plan.peers == (("js-worker-0-0.js", "127.0.0.1:41000"),)
    assert kubernetes.detect({"HOSTNAME": "laptop", "TFGPU_PODINFO": str(tmp_path / "none")}) is None


def test_tf_config_set_by_the_pod_template_is_used_when_it_agrees():
    environ, fqdn = indexed_pod(1)
    plan = plan_pod(environ, {}, fqdn, nnodes=2)
    given = plan.local[0].env["TF_CONFIG"]
    assert plan_pod({**environ, "TF_CONFIG": given}, {}, fqdn, nnodes=2).local[0].env["TF_CONFIG"] == given
    other = json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})
    with pytest.raises(ConfigError, match="disagrees with the indexed-job"):
        plan_pod({**environ, "TF_CONFIG": other}, {}, fqdn, nnodes=2)


@pytest.mark.parametrize(
    ("pod", "config", "message"),
    [
        (indexed_pod(2), {"nnodes": 2}, "outside the job's size"),
        (
            ({"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "train-0"}, "train-0"),
            {"nnodes": 2},
            "has no subdomain",
        ),
        (({"JOB_COMPLETION_INDEX": "1", "HOSTNAME": "mine"}, "mine.s"), {"nnodes": 2}, "should be named"),
        (({"JOB_COMPLETION_INDEX": "x", "HOSTNAME": "t-x"}, "t-x.s"), {"nnodes": 2}, "not a whole number"),
    ],
)
def test_bad_indexed_jobs_are_one_message(pod, config, message):
    environ, fqdn = pod
    with pytest.raises(ConfigError, match=message) as caught:
        plan_pod(environ, {}, fqdn, **config)
    assert caught.value.fix


@pytest.mark.parametrize(
    ("labels", "environ", "config", "message"),
    [
        ({"replicas": 2, "total": 2}, {}, {"nnodes": 3}, "--nnodes 3 disagrees with the JobSet"),
        ({"replicas": 2, "total": 3}, {}, {"nproc": 1, "ps": 2}, "ask for 2 worker and 2 ps pod"),
        ({"replicas": 2, "total": 3}, {}, {}, "needs --nproc on every pod"),
        ({"replicas": 2, "total": 2}, {"JOB_COMPLETION_INDEX": "1"}, {}, "one pod each"),
        ({"replicas": 1, "total": 1}, {}, {}, "outside replicated job"),
    ],
)
def test_bad_jobsets_are_one_message(labels, environ, config, message):
    env, lab, fqdn = jobset_pod("js", "worker", 1, **labels)
    with pytest.raises(ConfigError, match=message):
        plan_pod({**env, **environ}, lab, fqdn, **config)


def test_an_indexed_job_without_nnodes_is_a_sweep_of_lone_pods(clean_choices):
    """Indexed Jobs also run sweeps, one trial per pod: without --nnodes each pod trains alone."""
    from tfgpu import choices

    environ, fqdn = indexed_pod(3)
    assert kubernetes.pod_layout(environ, {}, fqdn) is None
    assert "without --nnodes" in choices.as_dict()["launch.kubernetes"]["reason"]


def test_a_jobset_pod_without_its_labels_is_not_taken_for_an_indexed_job():
    environ = {"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "js-worker-1-0"}
    with pytest.raises(ConfigError, match="may belong to a JobSet"):
        kubernetes.pod_layout(environ, None, "js-worker-1-0.js", nnodes=2)


def test_other_replicated_jobs_are_counted_from_the_flags():
    env, labels, fqdn = jobset_pod("js", "worker", 0, replicas=2, total=4)  # + 1 ps + 1 evaluator
    plan = plan_pod(env, labels, fqdn, nproc=1, ps=1)
    assert {k: len(v) for k, v in plan.cluster.items()} == {"chief": 1, "worker": 2, "ps": 1}


def test_tf_config_in_a_jobset_of_another_layout_is_used_as_given():
    env, labels, fqdn = jobset_pod("trainjob", "node", 0, replicas=2, total=2)  # Kubeflow Trainer v2
    assert kubernetes.pod_layout(env, labels, fqdn, strict=False) is None
    given = json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})
    config = LaunchConfig(command=(PY, "train.py"))
    from tfgpu.launch import plan_launch

    plan = plan_launch(
        config, environ={**env, "TF_CONFIG": given, "TFGPU_PODINFO": "/nonexistent"}, nvml_module=FakeNvml([])
    )
    assert plan.source == "tf_config"


def test_a_hosts_file_wins_over_the_pod():
    from tfgpu.launch import plan_launch

    environ, _ = indexed_pod(1)
    config = LaunchConfig(command=(PY, "train.py"), hosts=("a", "b"), node_rank=1, nproc=1)
    plan = plan_launch(config, environ={**environ, "TFGPU_PODINFO": "/nonexistent"}, nvml_module=FakeNvml([]))
    assert plan.source == "hosts" and plan.cluster == {"worker": ["a:23456", "b:23456"]}


def test_a_replicated_job_tfgpu_does_not_read_is_named():
    env, labels, fqdn = jobset_pod("js", "trainers", 0, replicas=1, total=1)
    with pytest.raises(ConfigError, match="'trainers' is not one tfgpu reads"):
        plan_pod(env, labels, fqdn)


def test_nnodes_and_port_need_a_cluster_of_several_machines():
    for config, message in (({"nnodes": 2}, "--nnodes needs --hosts"), ({"port": 2000}, "--port sets")):
        with pytest.raises(ConfigError, match=message):
            make_plan(
                LaunchConfig(command=(PY,), **config), inventory=[], environ={}, free_ports=lambda n: [1] * n
            )


# -- the manifests ----------------------------------------------------------------------------------


def emitted(kind, **kw):
    import yaml

    options = manifest.ManifestOptions(
        command=("python", "train.py", "--epochs", "3"), image="reg/tf:1", kind=kind, **kw
    )
    return list(yaml.safe_load_all(manifest.to_yaml(manifest.documents(options))))


def launch_args(container):
    """The pod's command, parsed by the CLI as the pod would."""
    import argparse

    from tfgpu.cli import launch as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(container["command"][1:])
    return cli.config_from(args)


def test_the_jobset_manifest_parses_and_its_pods_build_one_cluster():
    doc, _policy = emitted("kubernetes", nodes=2, gpus_per_node=4, ps=1)
    # the JobSet v1alpha2 schema's required fields (jobset_types.go: ReplicatedJob's name and
    # template; a pod's containers with name and image)
    assert doc["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and doc["kind"] == "JobSet"
    assert doc["metadata"]["name"] == "tfgpu-train"
    spec = doc["spec"]
    jobs = {job["name"]: job for job in spec["replicatedJobs"]}
    assert list(jobs) == ["worker", "ps"] and spec["successPolicy"]["operator"] in ("All", "Any")
    for job in jobs.values():
        assert job["template"]["spec"]["completions"] == 1
        pod = job["template"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] and container["image"] == "reg/tf:1"
        assert container["command"][-4:] == ["python", "train.py", "--epochs", "3"]
        assert container["ports"][0]["containerPort"] == 23456
        assert pod["restartPolicy"] == "Never"
        assert {v["name"] for v in pod["volumes"]} == {"podinfo", "checkpoints"}
    worker = jobs["worker"]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "resources" not in jobs["ps"]["template"]["spec"]["template"]["spec"]["containers"][0]
    # every pod the JobSet would create, given its labels, runs one cluster of this shape
    plans = []
    for name, job in jobs.items():
        container = job["template"]["spec"]["template"]["spec"]["containers"][0]
        config = launch_args(container)
        for i in range(job["replicas"]):
            env, labels, fqdn = jobset_pod("tfgpu-train", name, i, replicas=job["replicas"], total=3)
            pod = kubernetes.pod_layout(
                env, labels, fqdn, nnodes=config.nnodes, ps=config.ps, subdomain=config.subdomain
            )
            plans.append(
                make_plan(
                    config,
                    inventory=gpus(4 if name == "worker" else 0),
                    environ=env,
                    free_ports=no_ports,
                    pod=pod,
                )
            )
    cluster = one_cluster(plans)
    assert {k: len(v) for k, v in cluster.items()} == {"chief": 1, "worker": 8, "ps": 1}
    ports = {p["containerPort"] for p in worker["ports"]}
    assert {int(a.rpartition(":")[2]) for a in cluster["worker"] + cluster["chief"]} <= ports


def test_the_indexed_job_manifest_parses_and_its_pods_build_one_cluster():
    service, job, _policy = emitted(
        "kubernetes-job", nodes=3, gpus_per_node=2, gpus_per_proc=2, checkpoint_claim=None
    )
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    config = launch_args(container)
    plans = []
    for i in range(job["spec"]["completions"]):
        environ, _ = indexed_pod(i, job="tfgpu-train")
        pod_layout = kubernetes.pod_layout(
            environ, {}, "tfgpu-train-0", nnodes=config.nnodes, subdomain=config.subdomain
        )
        plans.append(
            make_plan(config, inventory=gpus(2), environ=environ, free_ports=no_ports, pod=pod_layout)
        )
    assert one_cluster(plans) == {"worker": [f"tfgpu-train-{i}.tfgpu-train:23456" for i in range(3)]}
    assert [p.local[0].gpus for p in plans] == [(0, 1)] * 3


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_the_network_policy_validates_and_fences_the_jobs_tensorflow_ports_to_its_own_pods():
    """Issue 47: TensorFlow's gRPC servers run any graph they are sent; the emitted NetworkPolicy
    lets only this job's pods reach its ports. Validated against Kubernetes' own schema (with the
    Job and Service, --strict: a misspelt or misplaced field fails here, not at kubectl apply);
    its selectors match every pod the manifest makes and no pod of another job."""
    import kubernetes_validate

    for kind, shape, pods in (
        ("kubernetes", {"nodes": 2, "gpus_per_node": 4, "ps": 1}, "jobset"),
        ("kubernetes-job", {"nodes": 3, "gpus_per_node": 2}, "job"),
    ):
        *made, policy = emitted(kind, **shape)
        for doc in [*made, policy]:
            if doc["kind"] != "JobSet":  # a CRD: not in Kubernetes' own schemas
                kubernetes_validate.validate(doc, "1.30", strict=True)
        assert policy["kind"] == "NetworkPolicy" and policy["spec"]["policyTypes"] == ["Ingress"]
        (rule,) = policy["spec"]["ingress"]
        (source,) = rule["from"]
        assert source["podSelector"] == policy["spec"]["podSelector"]
        if pods == "jobset":
            ours = [
                jobset_pod("tfgpu-train", job, i, replicas=n, total=3)[1]
                for job, n in (("worker", 2), ("ps", 1))
                for i in range(n)
            ]
            other = jobset_pod("other-job", "worker", 0, replicas=1, total=1)[1]
            declared = {
                p["containerPort"]
                for job in made[0]["spec"]["replicatedJobs"]
                for p in job["template"]["spec"]["template"]["spec"]["containers"][0]["ports"]
            }
        else:
            ours = [{"batch.kubernetes.io/job-name": "tfgpu-train", "job-name": "tfgpu-train"}] * 3
            other = {"batch.kubernetes.io/job-name": "other-job"}
            declared = {
                p["containerPort"] for p in made[1]["spec"]["template"]["spec"]["containers"][0]["ports"]
            }
        assert all(selects(policy["spec"]["podSelector"], labels) for labels in ours)
        assert not selects(policy["spec"]["podSelector"], other)
        assert {p["port"] for p in rule["ports"]} == declared  # every TensorFlow port, and only those
    assert [d["kind"] for d in emitted("kubernetes", network_policy=False)] == ["JobSet"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"image": ""}, "container image"),
        ({"name": "Bad_Name"}, "--name must be"),
        ({"nodes": 0}, "--nodes must be at least 1"),
        ({"gpus_per_node": 3, "gpus_per_proc": 2}, "does not divide"),
        ({"kind": "helm"}, "Unknown --emit"),
        ({"kind": "kubernetes-job", "ps": 1}, "would never end"),
    ],
)
def test_bad_manifest_options_are_one_message(options, message):
    with pytest.raises(ConfigError, match=message):
        manifest.ManifestOptions(command=("python", "x.py"), **{"image": "i", **options})


def test_emit_refuses_the_flags_it_would_ignore():
    import argparse

    from tfgpu.cli import launch as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(
        ["launch", "--emit", "kubernetes", "--image", "i", "--nproc", "2", "--", "python"]
    )
    with pytest.raises(ConfigError, match="--nproc would be ignored"):
        cli.manifest_from(args)


# -- waiting for peers ------------------------------------------------------------------------------


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_pods_wait_for_each_other_then_free_their_ports():
    a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    errors = []

    def pod(own, peer):
        try:
            peers.wait_for_peers(own, [("peer", peer)], timeout_s=120)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pod, args=(a, b)), threading.Thread(target=pod, args=(b, a))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for address in (a, b):  # closed again: TensorFlow binds it next
        with socket.socket() as sock:
            sock.bind(("", int(address.rpartition(":")[2])))


def test_a_pod_that_never_answers_is_named():
    own = f"127.0.0.1:{free_port()}"
    with socket.socket() as taken:  # bound, not listening: connections are refused
        taken.bind(("127.0.0.1", 0))
        missing = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(
            ClusterError,
            match=r"1 of 1 peer pod\(s\) did not answer.*js-ps-0-0.js \(port \d+ does not answer\)",
        ):
            peers.wait_for_peers(own, [("js-ps-0-0.js", missing)], timeout_s=1)


# -- pods as processes ------------------------------------------------------------------------------


def start_pod(args, environ, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_") and k != "TF_CONFIG"}
    return subprocess.Popen(
        [PY, "-m", "tfgpu.cli", "launch", *args],
        env={**env, **environ},
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_line(path, text, process):
    """Until the pod printed ``text`` (it is waiting for its peers) or ended."""
    import time

    while text not in path.read_text():
        assert process.poll() is None, path.read_text()[-3000:]
        time.sleep(0.1)


def finish(processes, logs, timeout=600):
    for process, log in zip(processes, logs, strict=True):
        assert process.wait(timeout=timeout) == 0, log.read_text()[-3000:]


@pytest.mark.slow
def test_a_two_pod_indexed_job_trains_as_one_process(tmp_path):
    """Pod 1 starts only once pod 0 waits for it: pod 0 waits, then both train multi-worker
    mirrored, and end with the weights one process gets (tfgpu launch --nproc 2 gets them too,
    tests/test_launch.py)."""
    ports = [free_port() for _ in range(2)]
    host_map = json.dumps({f"train-{i}.svc": f"127.0.0.1:{ports[i]}" for i in range(2)})
    script = [PY, str(ROOT / "examples" / "train_mwms.py"), str(tmp_path)]
    processes, logs = [], []
    for i in range(2):
        environ = {"JOB_COMPLETION_INDEX": str(i), "HOSTNAME": f"train-{i}", "TFGPU_HOST_MAP": host_map}
        logs.append(tmp_path / f"pod-{i}.log")
        with logs[-1].open("w") as out:
            processes.append(start_pod(["--nnodes", "2", "--subdomain", "svc", "--", *script], environ, out))
        if i == 0:
            wait_for_line(logs[0], "waiting for 1 peer pod(s) to answer: train-1.svc", processes[0])
    finish(processes, logs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_") and k != "TF_CONFIG"}
    subprocess.run(script, env=env, check=True, capture_output=True, timeout=300)
    w0, w1, one = (np.load(tmp_path / f"{t}.npz") for t in ("worker-0", "worker-1", "single"))
    for key in one.files:
        assert np.array_equal(w0[key], w1[key])
        np.testing.assert_allclose(w0[key], one[key], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_jobset_with_a_parameter_server_pod_trains_the_tutorial(tmp_path):
    """A JobSet of one worker pod (the chief and worker 0) and one ps pod, each told its place by
    its labels file: the parameter-server tutorial ends with Keras's one-device weights, as under
    tfgpu launch --ps 1 --nproc 1 (tests/test_parity_workers.py)."""
    from tutorials import ps_tutorial_trained_as_keras, tutorial

    ports = {"worker": free_port(), "ps": free_port()}
    host_map = json.dumps({f"js-{r}-0-0.js": f"127.0.0.1:{p}" for r, p in ports.items()})
    path, loaded = tutorial("parameter_server")
    processes, logs = [], []
    for role in ("ps", "worker"):
        podinfo = tmp_path / f"podinfo-{role}"
        podinfo.mkdir()
        labels = jobset_labels("js", role, 0, replicas=1, total=2)
        (podinfo / "labels").write_text("".join(f'{k}="{v}"\n' for k, v in sorted(labels.items())))
        environ = {
            "JOB_COMPLETION_INDEX": "0",
            "HOSTNAME": f"js-{role}-0-0",
            "TFGPU_PODINFO": str(podinfo),
            "TFGPU_HOST_MAP": host_map,
        }
        logs.append(tmp_path / f"{role}.log")
        with logs[-1].open("w") as out:
            processes.append(start_pod(["--nproc", "1", "--", PY, str(path), str(tmp_path)], environ, out))
        if role == "ps":  # the worker pod comes once the ps pod waits for it
            wait_for_line(logs[0], "waiting for 1 peer pod(s) to answer: js-worker-0-0.js", processes[0])
    finish(processes[1:], logs[1:])  # the worker pod ends when its chief is done
    finish(processes[:1], logs[:1])  # the ps pod once it sees the chief gone
    assert "the chief at 127.0.0.1:" in logs[0].read_text()
    ps_tutorial_trained_as_keras(loaded, tmp_path)


@pytest.mark.process
def test_dry_run_on_a_pod_prints_its_tf_config(tmp_path):
    from support.processes import run_cli

    environ = {"JOB_COMPLETION_INDEX": "1", "HOSTNAME": "train-1", "TFGPU_PODINFO": str(tmp_path)}
    done = run_cli(
        "launch", "--nnodes", "2", "--subdomain", "svc", "--dry-run", "--", PY, "x.py", env=environ
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("TF_CONFIG of worker 1: "))
    assert json.loads(line.split(": ", 1)[1]) == {
        "cluster": {"worker": ["train-0.svc:23456", "train-1.svc:23456"]},
        "task": {"type": "worker", "index": 1},
    }
    bad = run_cli("launch", "--nnodes", "1", "--subdomain", "svc", "--dry-run", "--", PY, "x.py", env=environ)
    assert bad.returncode == 2 and "outside the job's size" in bad.stderr and "Traceback" not in bad.stderr
    emitted = run_cli(
        "launch", "--emit", "kubernetes", "--nodes", "2", "--image", "r/i:1", "--", "python", "t.py"
    )
    assert emitted.returncode == 0 and emitted.stdout.startswith("apiVersion: jobset.x-k8s.io/v1alpha2")


def test_data_service_pods_find_the_dispatcher_on_pod_0(tmp_path):
    import argparse

    from tfgpu.cli import data_service

    parser = argparse.ArgumentParser()
    data_service.register(parser.add_subparsers())
    args = parser.parse_args(["data-service", "--nnodes", "3", "--subdomain", "svc"])
    environ = {"JOB_COMPLETION_INDEX": "2", "HOSTNAME": "feed-2", "TFGPU_PODINFO": "/nonexistent"}
    options = data_service.options_from(args, environ)
    assert options.hosts == ("feed-0.svc", "feed-1.svc", "feed-2.svc") and options.node_rank == 2
    env, labels, _ = jobset_pod("js", "ps", 0, replicas=1, total=2)
    podinfo = Path(tmp_path)
    (podinfo / "labels").write_text("".join(f'{k}="{v}"\n' for k, v in labels.items()))
    args = parser.parse_args(["data-service", "--subdomain", "js"])
    with pytest.raises(ConfigError, match="runs on a JobSet's worker pods"):
        data_service.options_from(args, {**env, "TFGPU_PODINFO": str(podinfo)})


# JobSet's CRD schema (openAPIV3Schema of jobset.x-k8s.io/v1alpha2), from kubernetes-sigs/jobset at
# 08dfbdfd, config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml
JOBSET_SCHEMA = Path(__file__).parent / "data" / "jobset.x-k8s.io_v1alpha2.schema.json.gz"


def unknown_fields(doc, schema, where="") -> list[str]:
    """Fields the schema does not declare (kubectl apply --validate=strict refuses them; the API
    server would drop them silently): the CRD's schema has no additionalProperties to say so."""
    if isinstance(doc, dict) and "properties" in schema:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return []
        found = []
        for key, value in doc.items():
            if key not in schema["properties"]:
                found.append(f"{where}.{key}")
            else:
                found += unknown_fields(value, schema["properties"][key], f"{where}.{key}")
        return found
    if isinstance(doc, list) and "items" in schema:
        return [
            f for i, item in enumerate(doc) for f in unknown_fields(item, schema["items"], f"{where}[{i}]")
        ]
    return []


@pytest.mark.parametrize(
    "shape", [{"nodes": 2, "gpus_per_node": 4}, {"nodes": 4, "gpus_per_node": 0, "ps": 2}]
)
def test_the_jobset_validates_against_jobsets_own_schema(shape):
    """Issue 44: the JobSet was checked for a few fields only; a misspelt or misplaced one would
    fail at kubectl apply. Checked against the CRD's schema: types, required fields, enums, and no
    field it does not declare."""
    import gzip

    import jsonschema

    schema = json.loads(gzip.decompress(JOBSET_SCHEMA.read_bytes()))
    jobset = next(doc for doc in emitted("kubernetes", **shape) if doc["kind"] == "JobSet")
    jsonschema.Draft7Validator(schema).validate(jobset)
    assert unknown_fields(jobset, schema) == []
    misplaced = json.loads(json.dumps(jobset))
    misplaced["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism "] = 1
    misplaced["spec"]["replicatedJobs"][0]["replica"] = 1
    assert unknown_fields(misplaced, schema) == [
        ".spec.replicatedJobs[0].template.spec.parallelism ",
        ".spec.replicatedJobs[0].replica",
    ]


@pytest.mark.parametrize("kind", ["kubernetes", "kubernetes-job"])
def test_a_pod_stopped_on_request_is_made_again_without_counting_as_a_failure(kind):
    """Issue 76: a preempted pod's run saves and exits 75 inside the pod's grace (the stop's
    TFGPU_STOP_GRACE and the launcher's own), and the Job's pod failure policy ignores that
    exit (and a disruption), so the pod is made again and resumes instead of failing the Job."""
    from tfgpu import env
    from tfgpu.errors import RESUMABLE

    docs = emitted(kind, nodes=2, gpus_per_node=1)
    jobs = [d for d in docs if d["kind"] == "Job"] or [
        j["template"] for d in docs if d["kind"] == "JobSet" for j in d["spec"]["replicatedJobs"]
    ]
    assert jobs
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] > env.stop_grace({}) + 10  # the launcher's --grace
        rules = job["spec"]["podFailurePolicy"]["rules"]
        exits = [r for r in rules if "onExitCodes" in r]
        assert exits[0]["action"] == "Ignore" and exits[0]["onExitCodes"]["values"] == [RESUMABLE]
        assert exits[0]["onExitCodes"]["containerName"] == pod["containers"][0]["name"]
