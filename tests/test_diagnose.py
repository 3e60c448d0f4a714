"""tfgpu diagnose: every workload with a known cause gets its verdict and its advice."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import tensorflow as tf

from support.processes import run_cli
from tfgpu.cli.diagnose import parse_duration
from tfgpu.diagnose import chain, diagnose, workloads
from tfgpu.errors import ConfigError

INPUTS = str(Path(__file__).parent / "diagnose_inputs.py")


def run(workload, *, model=None, **kw):
    return diagnose(
        workload.build(),
        model=model or (workload.model() if workload.model else None),
        step_time_s=workload.step_time_s,
        target_rate=workload.target_rate,
        steps=kw.pop("steps", 25),
        **kw,
    )


@pytest.mark.timing
@pytest.mark.parametrize("workload", workloads.WORKLOADS, ids=lambda w: w.name)
def test_workload_gets_its_verdict_and_advice(workload):
    if workload.expected_advice == ("none",):
        # no advice means a per-step overhead under 15% of the step; what a loaded host adds to
        # each step (a woken sleep, the loop's turn on a core) is milliseconds, and the 30 ms step
        # read 16% beside two busy TensorFlow jobs (bench/loaded.sh): a 3x longer step keeps the
        # pipeline as well tuned and the overhead a third
        workload = dataclasses.replace(workload, step_time_s=3 * workload.step_time_s)
    result = run(workload)
    data = result.to_dict()
    assert data["input_bound"] in workload.expected_input_bound, data["verdict"]
    assert data["advice"][0]["kind"] in workload.expected_advice, data["advice"]
    assert data["bottleneck"] == (
        "input" if "no" not in workload.expected_input_bound else data["bottleneck"]
    )
    assert set(data) >= {
        "bottleneck",
        "input_bound",
        "input_wait_fraction",
        "pipeline_examples_per_s",
        "device_examples_per_s",
        "cpu_seconds_per_example",
        "cores",
        "cores_needed",
        "stages",
        "layers",
        "advice",
        "decided_by",
        "certain",
        "spread",
    }
    assert data["decided_by"] and len(data["spread"]["input_wait_fraction"]) == 2
    # every fix offered gains 5% or more; "none" stands alone
    assert all(a["estimated_speedup"] >= 1.05 for a in data["advice"]) or [
        a["kind"] for a in data["advice"]
    ] == ["none"]


@pytest.mark.timing
def test_apply_measures_the_gain_of_parallelizing():
    result = run(workloads.by_name("sequential-map"), apply=True)
    item = next(a for a in result.advice if a.kind == "parallelize-map")
    assert result.applied["changes"] == ["map: num_parallel_calls=AUTOTUNE"]
    # the advice carries the gain the tuned pipeline measured against the device. Its size is a
    # timing (1.5-2x on an idle 2-core machine, 0.96-1.2x with a CPU-bound process on each core):
    # bench/diagnose_bench.py holds it to its goal, not this test
    gain = result.applied["examples_per_s"] / result.together_examples_per_s
    assert item.measured_speedup == pytest.approx(gain, rel=1e-2)
    assert result.applied["measured_speedup"] == pytest.approx(gain, rel=1e-2)
    assert 0 < result.applied["device_utilization"] <= 1


@pytest.mark.timing
def test_a_dispatch_bound_step_is_advised_steps_per_execution_with_its_measured_gain():
    """Issue 25: the gain is the Trainer's execution at K steps per call over one per call, with
    the input attached; the overhead figure is the step's own, the same in a second diagnosis."""
    workload = workloads.by_name("tiny-step")
    model = workload.model()
    before = [w.copy() for w in model.get_weights()]
    result = run(workload, model=model)
    assert [layer["name"] for layer in result.layers] and abs(
        sum(layer["share"] for layer in result.layers) - 1.0
    ) < 0.01
    assert result.verdict.bottleneck == "host"
    step = result.to_dict()["step"]
    assert step["steps_per_call"] == 8 and step["overhead"] >= 0.15
    assert step["overhead_spread"][0] <= step["overhead"] <= step["overhead_spread"][1]
    kinds = {a.kind: a for a in result.advice}
    spe = kinds["steps-per-execution"]
    assert spe.measured_speedup == spe.estimated_speedup and spe.measured_speedup >= 1.5
    assert kinds["increase-batch-size"].measured_speedup is not None
    assert result.verdict.host_overhead_fraction == pytest.approx(step["overhead"], abs=1e-4)
    # the step is measured once per model: a second diagnosis (another pipeline) shows the same figure
    again = diagnose(workload.build().map(lambda x, y: (x * 2.0, y)), model=model, steps=10, warmup=2)
    assert again.to_dict()["step"] == step
    # the step's memory, for the pipeline's batch
    assert result.memory.batch_size == result.batch_size and result.memory.fixed_bytes > 0
    # diagnose trained the model on synthetic and real batches, and put it back as it was
    assert all((a == b).all() for a, b in zip(before, model.get_weights(), strict=True))


@pytest.mark.timing
def test_a_fixed_cost_step_is_advised_a_larger_batch_first():
    """Issue 25: a step that does not grow with the batch because of work in the graph (not host
    dispatch): a larger batch is the measured fix, ranked above K steps per call.

    Only the large effect is asserted: the larger batch gains over 2x by construction, and advice
    is ranked by measured gain. What K steps per call gain here depends on the load beside the
    run (1.66x once, next to another test process: one dispatch per step competes for the cores),
    so its size is for bench/diagnose_bench.py, not a test (issue 44)."""
    result = run(workloads.by_name("fixed-cost-step"))
    # not the verdict: its per-step overhead sits near the 15% line (16% once in a full run), so
    # device or host is noise; the large effects are what it must get right
    assert result.verdict.bottleneck in ("device", "host"), result.decided_by
    assert result.advice[0].kind == "increase-batch-size" and result.advice[0].measured_speedup > 2
    measured = [a.measured_speedup for a in result.advice if a.measured_speedup is not None]
    assert measured == sorted(measured, reverse=True)


def test_chain_walk_finds_what_matters():
    def jitter(x):
        return tf.cast(x, tf.float32) + tf.random.uniform([])

    def python(x):
        return tf.numpy_function(lambda v: v, [x], tf.float32)

    def plain(x):
        return tf.cast(x, tf.float32) * 2

    ds = (
        tf.data.Dataset.range(10)
        .map(plain)
        .map(jitter)
        .map(python, num_parallel_calls=2)
        .batch(4)
        .prefetch(1)
    )
    stages = chain.walk(ds)
    assert [s.kind for s in stages] == ["source", "map", "map", "map", "batch", "prefetch"]
    assert [s.parallel for s in stages[1:4]] == [
        True,
        False,
        True,
    ]  # TF parallelizes the stateless plain map itself
    assert stages[2].random and stages[3].python and stages[4].batch_size == 4
    assert chain.prefetch_at_end(stages) and chain.examples_per_element(stages, 4) == 4


def test_tfgpu_pipeline_stages_by_plan_name(tmp_path):
    """A tfgpu.data pipeline is timed at its own stages, under their names; user stages follow."""
    import numpy as np

    from tfgpu import data

    np.save(tmp_path / "x.npy", np.arange(600, dtype="float32").reshape(300, 2))
    data.convert(tmp_path / "x.npy", tmp_path / "ds", options=data.ConvertOptions(min_shards=2, workers=1))
    ds = data.pipeline(tmp_path / "ds", batch_size=10, training=True, cache="off")
    stages = chain.walk(ds.map(lambda e: e))
    assert [s.name for s in stages][:-1] == ["read", "parse", "shuffle", "batch", "prefetch"]
    assert stages[-1].kind == "map"
    assert [chain.examples_per_element(stages, i) for i in range(5)] == [256, 1, 1, 10, 10]
    result = diagnose(ds, step_time_s=0.001, steps=8)
    assert [s["name"] for s in result.stages] == ["read", "parse", "shuffle", "batch", "prefetch"]
    assert all(s["examples_per_s"] > 0 for s in result.stages)


def _facts(**kw):
    from tfgpu.diagnose import advice

    stage = {"name": "map#2", "kind": "map", "parallel": False, "python": False, "random": True}
    stage.update(share=0.5, batched=True, per_example_s=1.9e-4, cpu_per_example_s=1.9e-4, detail="sequential")
    base = dict(
        pipeline_rate=2600.0,
        device_rate=2250.0,
        together_rate=1100.0,
        cores=2,
        cpu_s_per_example=4e-4,
        stages=[stage],
        prefetch_at_end=False,
        input_bound="highly",
        host_overhead=0.0,
        deterministic_prefix_share=0.0,
        fits_in_memory=False,
        gpu_model=False,
    )
    return advice.Facts(**{**base, **kw})


def test_without_prefetch_a_faster_stage_still_takes_turns_so_prefetch_ranks_first():
    """P > D and no prefetch: the missing overlap is the cause; a faster map alone gains less."""
    from tfgpu.diagnose import advice

    items = {a.kind: a.estimated_speedup for a in advice.advise(_facts())}
    assert advice.advise(_facts())[0].kind == "prefetch"
    assert items["prefetch"] == pytest.approx(2250 / 1100)
    serial = 1 / (1 / (2600 / (0.5 + 0.5 / 2)) + 1 / 2250)  # map twice as fast, still taking turns
    assert items["parallelize-map"] == pytest.approx(serial / 1100)
    with_prefetch = {a.kind: a.estimated_speedup for a in advice.advise(_facts(prefetch_at_end=True))}
    assert with_prefetch["parallelize-map"] == pytest.approx(2250 / 1100)  # the slower side sets the pace


def test_a_tiny_map_is_told_to_vectorize_by_its_cpu_work_not_its_wall_time():
    """Beside two busy TensorFlow jobs the tiny-ops map (25 µs of wall time per element alone)
    lost its advice to vectorize in two runs of ten: wall time stretches under load, so its CPU
    work per element (34 µs) decides. Here the wall time is stretched past the 100 µs line."""
    from tfgpu.diagnose import advice

    def first(wall, cpu):
        stage = {"name": "map#1", "kind": "map", "parallel": True, "python": False, "random": False}
        stage.update(share=0.9, batched=False, per_example_s=wall, cpu_per_example_s=cpu, detail="")
        return advice.advise(_facts(stages=[stage], prefetch_at_end=True))[0]

    loaded = first(wall=2.0e-4, cpu=3.4e-5)
    assert loaded.kind == "vectorize" and "34 µs of CPU work per element" in loaded.detail
    assert first(wall=2.5e-5, cpu=3.0e-4).kind != "vectorize"  # real work per element: not overhead


@pytest.mark.timing
def test_simulated_device_runs_at_the_rate_asked():
    """A sleep overshoots by ~0.1-0.2 ms; the device learns that and sleeps less, so a short step
    (50,000 examples/s in batches of 32: 0.64 ms) is not a fifth slower than asked. On a loaded
    host the overshoot it learns varies, and it ran 16% fast beside another TensorFlow job (58,188
    examples/s): the bounds are "not slower" and "not much faster", not 10% either way. One late
    wake-up no longer moves what it learns (the median of its last sleeps: CI saw a 4 ms step run
    in 2.96 ms when it learned a running mean)."""
    from tfgpu.diagnose.device import RateDevice, SimulatedDevice

    assert SimulatedDevice(0.004).step_seconds(None, 8) == pytest.approx(0.004, rel=0.1)
    device = RateDevice(50_000, 32)
    assert 45_000 <= 32 / device.step_seconds(None, 32, repeats=30) <= 75_000


def test_one_late_wake_up_does_not_make_the_simulated_device_run_fast(monkeypatch):
    """On a clock where every sleep overshoots by 0.15 ms and one wakes 5 ms late, the steps after
    the late one still take the 4 ms asked (to 2%)."""
    from tfgpu.diagnose import device as module

    class Clock:
        now, sleeps = 0.0, 0

        def perf_counter(self):
            return self.now

        def sleep(self, seconds):
            self.sleeps += 1
            self.now += seconds + (0.005 if self.sleeps == 12 else 0.00015)

    clock = Clock()
    monkeypatch.setattr(module, "time", clock)
    simulated = module.SimulatedDevice(0.004)
    steps = []
    for _ in range(30):
        start = clock.now
        simulated.step(None)
        steps.append(clock.now - start)
    assert steps[11] > 0.008  # the late one
    assert all(s == pytest.approx(0.004, rel=0.02) for s in steps[3:11] + steps[12:])


def test_exactly_one_device_side():
    with pytest.raises(ConfigError, match="exactly one device side"):
        diagnose(workloads.in_memory(), step_time_s=0.01, target_rate=10.0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30ms", 0.03), ("1.5 ms", 0.0015), ("0.2s", 0.2), ("250us", 0.00025)],
)
def test_step_time_parsing(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_a_step_time_without_a_unit_is_refused():
    """Issue 44: "9" was taken as 9 ms without a word; it is a mistake as often as not."""
    with pytest.raises(ConfigError, match="needs a unit") as caught:
        parse_duration("9")
    assert "9ms" in caught.value.fix


@pytest.mark.process
def test_cli_json_html_and_bad_input(tmp_path):
    done = run_cli(
        "diagnose",
        "--dataset",
        f"{INPUTS}:memory",
        "--model",
        f"{INPUTS}:tiny_model",
        "--steps",
        "10",
        "--json",
        "--html",
        str(tmp_path / "r.html"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert data["bottleneck"] == "host" and data["layers"]
    assert data["memory"]["source"] == "estimated" and data["memory"]["per_example_bytes"] > 0
    page = (tmp_path / "r.html").read_text()
    assert (
        page.count("data:image/png;base64,") == 3
        and "Advice (ranked by measured gain where measured, else estimated)" in page
    )
    for args, needle in (
        (["--dataset", f"{INPUTS}:not_a_dataset", "--step-time", "5ms"], "not a tf.data.Dataset"),
        (["--dataset", f"{INPUTS}:memory", "--model", f"{INPUTS}:uncompiled_model"], "not compiled"),
        (["--dataset", f"{INPUTS}:memory", "--step-time", "fast"], "--step-time must be a duration"),
        (["--dataset", "nowhere.py:f", "--step-time", "5ms"], "does not exist"),
    ):
        bad = run_cli("diagnose", *args)
        assert bad.returncode == 2 and needle in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


@pytest.mark.process
def test_cli_apply_exits_1_when_still_input_bound():
    done = run_cli(
        "diagnose",
        "--dataset",
        f"{INPUTS}:sequential",
        "--target-rate",
        "100000",
        "--steps",
        "10",
        "--apply",
        "--json",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert json.loads(done.stdout)["input_bound"] == "highly"


@pytest.mark.process
def test_cli_apply_measures_through_a_local_service():
    done = run_cli(
        "diagnose", "--dataset", f"{INPUTS}:sequential", "--step-time", "5ms", "--steps", "10",
        "--apply", "--service-workers", "1", "--json",
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    served = json.loads(done.stdout)["applied"]["service"]
    assert served["workers"] == 1 and served["examples_per_s"] > 0 and served["measured_speedup"] > 0
    bad = run_cli(
        "diagnose", "--dataset", f"{INPUTS}:sequential", "--step-time", "5ms", "--service-workers", "1"
    )
    assert bad.returncode == 2 and "pass --apply --service-workers 1" in bad.stderr


@pytest.mark.process
def test_profile_writes_a_trace(tmp_path):
    done = run_cli(
        "profile",
        "--dataset",
        f"{INPUTS}:memory",
        "--step-time",
        "1ms",
        "--steps",
        "3",
        "--log-dir",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(tmp_path.rglob("*.xplane.pb"))


@pytest.mark.timing
def test_unknown_shapes_from_numpy_function_are_measured():
    """Issue 18: tf.numpy_function leaves even the rank unknown; diagnose, --apply and a model
    device work from one real element's shapes."""
    import keras
    import numpy as np
    import tensorflow as tf

    dataset = (
        tf.data.Dataset.range(640)
        .map(lambda i: tf.numpy_function(lambda x: (np.ones(8) * x).astype(np.float32), [i], tf.float32))
        .map(lambda x: (x, tf.constant(0, tf.int64)))
        .batch(32)
    )
    result = diagnose(dataset, step_time_s=0.002, steps=8, warmup=2, apply=True, service_workers=1)
    assert result.to_dict()["pipeline_examples_per_s"] > 0 and result.applied is not None
    assert "calls Python" in result.applied["service"]["skipped"]  # a service worker cannot run it
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    result = diagnose(dataset, model=model, steps=8, warmup=2)
    assert [layer["name"] for layer in result.layers]


def test_the_verdict_follows_from_its_figures_and_repeats():
    """Issue 18: the rules that keep the verdict consistent with the figures printed beside it."""
    from tfgpu.diagnose import advice, judge
    from tfgpu.diagnose.measure import TogetherRun

    def together(wait, rate, overhead=0.0):
        return TogetherRun(examples_per_s=rate, input_wait_fraction=wait, host_overhead_fraction=overhead)

    # no prefetch: input and device take turns, the wait is real even with a fast pipeline
    turns = judge.judge_round(together(0.08, 900), pipeline_rate=3000, device_rate=1000, prefetched=False)
    assert turns.verdict.input_bound == "moderately" and "input wait 8%" in turns.decided_by
    # prefetched and twice as fast: the waits are per-step fetch cost; a step's own measured
    # overhead stays as measured (the same step gets the same figure with any pipeline)
    fetch = judge.judge_round(
        together(0.08, 900), pipeline_rate=3000, device_rate=1000, prefetched=True,
        overhead=0.3, overhead_why="the step took 1 ms one per call and 0.7 ms with 8 per call",
    )  # fmt: skip
    assert fetch.verdict.input_bound == "no" and fetch.verdict.bottleneck == "host"
    assert fetch.overhead == 0.3 and "0.7 ms with 8 per call" in fetch.decided_by
    assert "per-step fetch cost" in fetch.decided_by
    unmeasured = judge.judge_round(
        together(0.08, 900, 0.1), pipeline_rate=3000, device_rate=1000, prefetched=True
    )
    assert unmeasured.overhead == pytest.approx(0.18)  # the loop's leftover time and the fetch cost
    # the device ran at its own rate with the input attached: the waits cost nothing
    fed = judge.judge_round(together(0.08, 990), pipeline_rate=1500, device_rate=1000, prefetched=True)
    assert fed.verdict.input_bound == "no" and "ran at 99% of its own rate" in fed.decided_by
    rounds = iter([turns, fed, turns])
    agreed = judge.judge(lambda: next(rounds))
    assert agreed.chosen.verdict.input_bound == "moderately" and not agreed.certain
    assert agreed.chosen.decided_by.startswith("uncertain: the 3 runs disagreed (input wait 0%-8%")
    assert agreed.spread()["input_wait_fraction"] == [0.0, 0.08]
    same = iter([turns, turns, turns])
    assert judge.judge(lambda: next(same)).certain
    # a fix estimated at 1.00x is not advice
    facts = advice.Facts(
        pipeline_rate=1000, device_rate=1000, together_rate=1000, cores=2, cpu_s_per_example=0.001,
        stages=[], prefetch_at_end=False, input_bound="moderately", host_overhead=0.0,
        deterministic_prefix_share=0.0, fits_in_memory=True, gpu_model=False,
    )  # fmt: skip
    items = advice.advise(facts)
    assert [a.kind for a in items] == ["none"] and "prefetch" in items[0].detail
    # without a model the step advice is an estimate, marked so, and no more than the device alone gives
    loop = dataclasses.replace(facts, input_bound="no", host_overhead=0.9, together_rate=800)
    estimated = {a.kind: a for a in advice.advise(loop)}
    assert estimated["steps-per-execution"].measured_speedup is None
    assert estimated["steps-per-execution"].estimated_speedup == pytest.approx(1000 / 800)
    assert "estimated, not measured" in estimated["increase-batch-size"].detail


def test_more_input_workers_says_how_many_hosts():
    from tfgpu.diagnose import advice

    assert advice.service_hosts(17.9, 2) == 8 and advice.service_hosts(3.0, 2) == 1
    facts = advice.Facts(
        pipeline_rate=1000, device_rate=9000, together_rate=1000, cores=2, cpu_s_per_example=0.002,
        stages=[], prefetch_at_end=True, input_bound="highly", host_overhead=0.0,
        deterministic_prefix_share=0.0, fits_in_memory=True, gpu_model=False,
    )  # fmt: skip
    item = next(a for a in advice.advise(facts) if a.kind == "more-input-workers")
    assert "needs 18.0 cores" in item.detail and "9 tf.data service workers" in item.detail
    assert "this one and 8 more host(s)" in item.detail
    start, use = item.commands
    assert start.startswith("tfgpu data-service --workers 1 --port 5050 --hosts hosts.txt --node-rank R")
    assert "on each of the 9 hosts" in start and use.startswith(
        "tfgpu train TASK --data-service grpc://HOST0:5050"
    )
    assert item.to_dict()["commands"] == [start, use]
    # a Python stage cannot run on a service worker: say to replace it first, give no command
    python = dataclasses.replace(
        facts,
        stages=[
            {
                "name": "map(numpy_function)",
                "share": 0.9,
                "python": True,
                "kind": "map",
                "parallel": True,
                "batched": True,
            }
        ],
    )
    item = next(a for a in advice.advise(python) if a.kind == "more-input-workers")
    assert (
        "first replace stage map(numpy_function)" in item.detail
        and "9 tf.data service workers" in item.detail
    )
    assert item.commands == ()
    # replacing the Python stage is listed first even where its own gain reads small (a loaded
    # machine measured the pipeline alone slower than with the device): the service needs it done
    busy = dataclasses.replace(python, together_rate=1800)
    kinds = [a.kind for a in advice.advise(busy)]
    assert kinds[0] == "replace-python-function" and kinds[-1] == "more-input-workers", kinds


@pytest.mark.parametrize(
    "waits", [(0.03, 0.03, 0.03), (0.05, 0.05, 0.05), (0.06, 0.06, 0.06), (0.03, 0.05, 0.06)]
)
def test_a_figure_within_the_noise_of_a_cut_off_is_said_to_be_on_its_line(waits):
    """Issue 54: three demo runs read the naive pipeline's wait as 3%, 5% and 6% and called it
    device-bound, device-bound and moderately input-bound. Each now says it is on the 5% line."""
    from tfgpu.diagnose import judge
    from tfgpu.diagnose.measure import TogetherRun

    def measured(wait):
        run = TogetherRun(examples_per_s=900, input_wait_fraction=wait, host_overhead_fraction=0.0)
        return judge.judge_round(run, pipeline_rate=3000, device_rate=1000, prefetched=False)

    rounds = iter([measured(w) for w in waits])
    verdict = judge.judge(lambda: next(rounds)).chosen.verdict
    assert verdict.borderline == "5% input wait"
    # the same words whichever side of the line the median fell
    figure = f"{verdict.input_wait_fraction:.0%} of step time waiting for input"
    assert verdict.sentence() == (
        f"device-bound or MODERATELY input-bound (on the 5% input wait line, within the noise): {figure}"
    )


def test_a_figure_clear_of_every_cut_off_is_not_borderline():
    from tfgpu import verdict

    assert (
        verdict.verdict(input_wait_fraction=0.10, host_overhead_fraction=0.02, noise=0.02).borderline is None
    )
    assert verdict.verdict(input_wait_fraction=0.0, host_overhead_fraction=0.16, noise=0.02).borderline == (
        "15% per-step overhead"
    )
    assert verdict.verdict(input_wait_fraction=0.06).borderline is None  # training's own: no noise given


def test_a_stall_of_the_machine_is_not_charged_to_every_step():
    """A loaded CI run read a well-tuned pipeline's 30 ms steps as 26% per-step overhead and
    advised steps per call. A stall (here one fetch and one device step held 0.4 s each, 16x a
    step between them) is input wait in the run's total, but the per-step overhead and fetch
    cost are a typical step's: under 15% however late the machine's wake-ups come in one step."""
    import time

    from tfgpu.diagnose import judge, measure

    def rows():
        for i in range(25):
            if i == 12:
                time.sleep(0.4)
            yield [float(i)]

    class Stalling:
        calls = 0

        def step(self, batch):
            self.calls += 1
            time.sleep(0.4 if self.calls == 15 else 0.025)

    dataset = tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec([1], tf.float32)).batch(1)
    run = measure.together(dataset, Stalling(), steps=24, warmup=2, device_step_s=0.025)
    stalled = 0.4 * 2 / (24 * 0.025 + 0.8)
    assert run.input_wait_fraction >= 0.2  # the run's total keeps the wait it had
    assert run.host_overhead_fraction + run.fetch_fraction < 0.15 < stalled
    fetch = judge.judge_round(run, pipeline_rate=1e6, device_rate=40, prefetched=True)
    assert fetch.verdict.bottleneck == "device" and fetch.overhead < 0.15
