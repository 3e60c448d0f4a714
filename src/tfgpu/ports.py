"""Ports on this host: pick free ones, or check that one is free, before a process binds it.

One module for what ``tfgpu launch``, the tf.data service and ``tfgpu.testing`` each did with a
socket of their own. It imports nothing from tfgpu, so every layer may use it.
"""

from __future__ import annotations

import errno
import socket
from contextlib import ExitStack


def free_ports(count: int, host: str = "localhost") -> list[int]:
    """``count`` distinct ports that were free a moment ago on ``host``.

    Every socket stays bound until all are picked: the OS may hand a port closed a moment ago out
    again, and two processes given the same port fail to start.
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def in_use(port: int, host: str = "") -> bool:
    """Whether something listens on ``port`` of ``host`` ("": any interface, where TensorFlow's
    gRPC servers bind).

    A listener holds the port; connections closed a moment ago (TIME_WAIT, after a restart on the
    same ports) do not, and gRPC binds over them, so SO_REUSEADDR lets this check bind over them
    too. Any other failure to bind (a privileged port, an address not of this host) is raised.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return True
        return False
