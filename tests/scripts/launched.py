"""What a script run under `tfgpu launch` keeps for its test: each task's results, pickled, and
the strategy tfgpu chose there, named by the task (``worker-0-NAME.pkl``,
``worker-0-strategy.json``). Shared by the scripts that tests start under the launcher."""

import json
import os
import pickle
from typing import Any


def task_name() -> str:
    """This process's task in TF_CONFIG, as ``worker-0``."""
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    return f"{task['type']}-{task['index']}"


def keep(out: str, name: str, results: Any) -> None:
    with open(os.path.join(out, f"{task_name()}-{name}.pkl"), "wb") as handle:
        pickle.dump(results, handle)


def keep_strategy(out: str) -> None:
    import tfgpu

    with open(os.path.join(out, f"{task_name()}-strategy.json"), "w") as handle:
        json.dump(tfgpu.choices.as_dict().get("strategy"), handle)
