"""Under tfgpu launch: worker 1 kills itself on the first attempt; the restart finishes."""

import json
import os
import signal
import time

task = json.loads(os.environ["TF_CONFIG"])["task"]
attempt = int(os.environ["TFGPU_LAUNCH_ATTEMPT"])
if attempt == 0 and task["index"] == 1:
    print("dying on attempt 0", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
if attempt == 0:
    time.sleep(120)  # stopped when worker 1 dies
print(f"worker {task['index']} finished on attempt {attempt}", flush=True)
