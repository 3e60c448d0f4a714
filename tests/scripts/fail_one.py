"""Under tfgpu launch: worker 1 fails with status 3; every other process waits to be stopped."""

import json
import os
import sys
import time

task = json.loads(os.environ["TF_CONFIG"])["task"]
if task["type"] == "worker" and task["index"] == 1:
    time.sleep(0.5)
    print("worker 1 is about to fail: boom", flush=True)
    sys.exit(3)
print(f"{task['type']} {task['index']} waiting", flush=True)
time.sleep(120)
