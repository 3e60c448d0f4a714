"""The main suite: a pytest process per test file, three at a time, the longest first.

Why a process per file: a pytest process slowed as it ran (a test of 30 s alone took 140 s deep in
a lane that had run 175 tests of models and iterators), a failure names its file, and a hang is cut
at a ceiling and named. Measured on a fresh clone here: 35 jobs, 3,611 s of job time, about what
the three long processes took (each start costs about 6 s, and tests no longer slow down), in 1,813
s of wall time. Why three at a time on a 2-core machine: a job waits on its child processes (the
tfgpu command, launched workers, a data service, a document's Python) for much of its time, and a
third job fills those waits: six files (test_data_service, test_predict, test_preemption,
test_data, test_input_forms, test_remat) took 462 s two at a time and 414 s three at a time here,
the cores busy 1.65 and 1.78 of 2 on average (2026-12-07). The suite already has to pass beside two
busy TensorFlow jobs (`make test-loaded`), so the jobs beside each one are a load it holds. Why
the longest first: the last job to start should be a short one, so both cores stay busy
to the end; ``durations.json`` holds each file's seconds from a run here (a file it does not know
is taken as long, so a new file starts early rather than last).

Each job's output is printed whole when it ends, with its status and seconds; the status of the
run is the first failed job's. A file whose process TensorFlow's native code crashed (SIGSEGV:
once, in the iterator the replica proof makes, in 1 of 5 runs of test_guides.py here (its examples are in tests/test_parity_*.py now), 2026-11-27;
it did not recur in 5 runs alone or 1 more of the file) is run once more, the crash and both
outputs printed. ``--after CMD`` adds a command as one more job (make test: the
Estimator lane and the built wheel).

    python .ci/test_main.py [FILE]... [--after CMD]... [--write-durations]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_SECONDS = 600.0  # a file not in durations.json: started among the first
# each job runs in its own process group (so a hang's children die with it): these are killed when
# the run is stopped (Ctrl-C, SIGTERM), or they would go on without it
RUNNING: set[subprocess.Popen] = set()
CEILING_SECONDS = 2400.0  # one job's: the longest takes about 700 s on a fresh clone here


@dataclass(frozen=True)
class Job:
    name: str
    argv: list[str]
    shell: bool = False


@dataclass(frozen=True)
class Done:
    job: Job
    status: int
    seconds: float
    output: str


def jobs(*, python: str, files: list[str], after: list[str]) -> list[Job]:
    """Each test file's pytest (every file when none is named) and the ``after`` commands, the
    longest (by the last run) first."""
    files = files or [f"tests/{f.name}" for f in sorted((ROOT / "tests").glob("test_*.py"))]
    found = [Job(f, [python, "-m", "pytest", "-q", "--durations=5", f]) for f in files]
    found += [Job(cmd, [cmd], shell=True) for cmd in after]
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    return sorted(found, key=lambda job: -known.get(job.name, UNKNOWN_SECONDS))


def run(job: Job, *, ceiling: float) -> Done:
    """The job to its end, or, past ``ceiling`` seconds (only a hang gets there), its process group
    killed and what it printed so far kept (status 124, as timeout(1) says)."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci"}
    started = time.monotonic()
    proc = subprocess.Popen(
        job.argv[0] if job.shell else job.argv,
        shell=job.shell,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    RUNNING.add(proc)
    try:
        output, _ = proc.communicate(timeout=ceiling)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f"\n== killed after {ceiling:.0f} s: a hang (every file takes under a third of it)"
        status = 124
    finally:
        RUNNING.discard(proc)
    return Done(job, status, time.monotonic() - started, output)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    parser.add_argument("--after", action="append", default=[], metavar="CMD")
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--write-durations", action="store_true", help=f"write {DURATIONS.name}")
    args = parser.parse_args()
    todo = jobs(python=sys.executable, files=args.files, after=args.after)
    lock = threading.Lock()
    finished: list[Done] = []
    started = time.monotonic()

    def one(job: Job) -> None:
        done = run(job, ceiling=CEILING_SECONDS)
        if done.status == -signal.SIGSEGV:  # TensorFlow's native code crashed: run the file once more
            again = run(job, ceiling=CEILING_SECONDS)
            said = f"\n== crashed (SIGSEGV) after {done.seconds:.0f} s: run once more, said here\n"
            done = Done(job, again.status, done.seconds + again.seconds, done.output + said + again.output)
        with lock:
            finished.append(done)
            print(
                f"== {job.name}: exit {done.status} in {done.seconds:.0f} s "
                f"({len(finished)} of {len(todo)}, {time.monotonic() - started:.0f} s in)",
                flush=True,
            )
            print(done.output, flush=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    pool = ThreadPoolExecutor(max_workers=args.parallel)
    try:
        for future in [pool.submit(one, job) for job in todo]:
            future.result()
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in list(RUNNING):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    pool.shutdown()
    failed = [d for d in finished if d.status != 0]
    print(
        f"== {len(todo)} jobs in {time.monotonic() - started:.0f} s; failed: "
        f"{', '.join(d.job.name for d in failed) or 'none'}"
    )
    if args.write_durations:
        seconds = {d.job.name: round(d.seconds, 1) for d in sorted(finished, key=lambda d: d.job.name)}
        DURATIONS.write_text(json.dumps(seconds, indent=1) + "\n")
    # a job killed by a signal has a negative status; the run's is 1 then
    return (failed[0].status if failed[0].status > 0 else 1) if failed else 0


if __name__ == "__main__":
    sys.exit(main())
