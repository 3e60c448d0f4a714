"""Writes about 10 MB to stdout, fast."""

import sys

line = "x" * 99 + "\n"
for _ in range(100_000):
    sys.stdout.write(line)
print("chatty done", flush=True)
