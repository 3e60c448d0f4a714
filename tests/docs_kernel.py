"""One document's Python: runs the code blocks it is sent, in order, in one namespace.

tests/test_docs_run.py starts one of these per document (a fresh TensorFlow, so a block may call
``tfgpu.configure`` first thing, as the README tells users to) and sends it each ``python`` block
as one JSON line; it answers one JSON line on the descriptor it was started with. What the blocks
print goes to stderr, which the test shows when a block fails.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the blocks' prints go where stderr goes
    sys.stdout = sys.stderr
    namespace: dict = {"__name__": "__main__"}
    for line in sys.stdin:
        request = json.loads(line)
        # padded so a traceback gives the block's line in the document
        source = "\n" * request["line"] + request["source"]
        try:
            exec(compile(source, request["path"], "exec"), namespace)
            answer = {"ok": True}
        except BaseException:  # reported to the test as the block's failure
            answer = {"ok": False, "error": traceback.format_exc(limit=-8)}
        sys.stderr.flush()
        print(f"--- end of block at line {request['line'] + 1}", file=sys.stderr, flush=True)
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
