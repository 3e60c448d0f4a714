"""Whether this host's TensorFlow servers can be reached from the internet.

Every process ``tfgpu launch`` starts (workers, parameter servers, the chief) runs TensorFlow's
gRPC server, and so does every ``tfgpu data-service`` dispatcher and worker. TensorFlow binds it
to every interface (``0.0.0.0:<port>`` and ``[::]:<port>``, hard-coded in
``grpc_server_lib.cc``; TensorFlow 2.21 has no bind-address option), with no authentication and
no encryption, and such a server "executes the graphs it is sent without performing any checks"
(TensorFlow's SECURITY.md, "Running a TensorFlow server"): whoever reaches the port runs code as
the process. On a host whose addresses are all private that is the cluster's own network; on a
host with a public address it may be the internet.

"Public" is Python's ``ipaddress`` ``is_global`` (IANA's special-purpose registries): loopback,
RFC 1918, link-local, unique-local IPv6, shared (CGNAT) and documentation ranges are not.
Reading the addresses uses psutil and never TensorFlow.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

DOCS = "docs/multi-node.md (Security)"


def host_addresses() -> dict[str, list[str]]:
    """interface -> its IP addresses (IPv4 and IPv6; MAC addresses left out)."""
    import socket

    import psutil

    families = (socket.AF_INET, socket.AF_INET6)
    return {
        name: [a.address.split("%")[0] for a in addrs if a.family in families]
        for name, addrs in psutil.net_if_addrs().items()
    }


def public_addresses(interfaces: Mapping[str, Sequence[str]] | None = None) -> list[tuple[str, str]]:
    """(interface, address) of every public address of this host (``interfaces``: given, for
    tests; None: this host's)."""
    found = []
    for name, addresses in (host_addresses() if interfaces is None else interfaces).items():
        for text in addresses:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue
            if address.is_global:
                found.append((name, text))
    return found


def warning(ports: Sequence[int], interfaces: Mapping[str, Sequence[str]] | None = None) -> str | None:
    """One line naming the public address(es) and the ports TensorFlow's servers will listen on
    there, or None on a host whose addresses are all private."""
    public = public_addresses(interfaces)
    if not public or not ports:
        return None
    where = ", ".join(f"{address} ({name})" for name, address in public[:3])
    more = f" and {len(public) - 3} more" if len(public) > 3 else ""
    shown = ", ".join(str(p) for p in sorted(set(ports))[:8]) + (" ..." if len(set(ports)) > 8 else "")
    return (
        f"this host has a public address, {where}{more}: TensorFlow's servers will listen on ports "
        f"{shown} there, unauthenticated, and run any graph they are sent; fence them off "
        f"(a firewall, a private network) as {DOCS} says"
    )
