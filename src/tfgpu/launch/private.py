"""``tfgpu launch --private-network``: one host's processes in a network namespace of their own.

TensorFlow 2.21's gRPC server binds every interface (``0.0.0.0`` and ``[::]``, hard-coded in
``grpc_server_lib.cc``) and has no bind-address option or credentials hook, so its port cannot be
kept off the host's network by TensorFlow. A new network namespace holding only loopback can:
the workers find each other on 127.0.0.1 inside it and nothing outside it can connect. Made with
``unshare --net --map-root-user`` (a user namespace: no privileges needed where the kernel allows
unprivileged user namespaces); the user stays who they are, so the GPUs' device files open as
before. Measured on the 2-core VM (``examples/train_mwms.py``, 2 workers): the same final loss
(2.352283) in 8 s against 9 s outside, and no listening socket seen from the host's namespace
against 2 outside. The price: the processes reach no network at all (no remote storage, no
dataset download), so it is asked for, never the default, and single-host only.
"""

from __future__ import annotations

import fcntl
import shutil
import socket
import struct

from tfgpu.errors import ConfigError

INSIDE = "--private-network-inside"  # the flag the re-executed tfgpu launch gets
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def wrapper() -> list[str]:
    """The command that starts its arguments in a new network namespace (as the same user)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise ConfigError(
            "--private-network needs the unshare command (util-linux), which is not on PATH",
            value="unshare",
            fix="install util-linux, or run without --private-network behind a firewall",
        )
    return [unshare, "--net", "--map-root-user", "--"]


def bring_loopback_up() -> None:
    """Inside the new namespace loopback starts down: up, so the workers reach 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def check_single_host(*, hosts: object, nnodes: int | None) -> None:
    if hosts is not None or (nnodes or 1) > 1:
        raise ConfigError(
            "--private-network keeps one host's processes off every network, so it cannot join other hosts",
            value={"hosts": bool(hosts), "nnodes": nnodes},
            fix="use it for single-host runs; fence a multi-host cluster with a private network or firewall "
            "(docs/multi-node.md, Security)",
        )
