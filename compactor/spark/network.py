"""Which address the Spark driver binds to and advertises, so executors can reach it without the user setting
``SPARK_LOCAL_IP``.

Spark's default is the address the machine's hostname resolves to; on many hosts (Debian's ``127.0.1.1``,
containers, laptops on VPNs) that is a loopback or unroutable address, and executors on other machines then
cannot connect back. The driver instead takes the local address the operating system would use to reach the
master (a UDP socket "connect" sends nothing), and for a local master the loopback address.
"""

from __future__ import annotations

import contextlib
import socket

DEFAULT_MASTER_PORT = 7077
LOOPBACK = "127.0.0.1"


def routed_address(host: str, port: int) -> str | None:
    """The local address that routes to ``host:port``, or ``None`` if the host cannot be resolved or reached."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        address = str(probe.getsockname()[0])
        return address if address != "0.0.0.0" else None
    return None


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs everything in the driver's JVM (``local``, ``local[N]``, ``local[N,F]``)."""
    return master.startswith("local")


def driver_address(master: str) -> str | None:
    """The address the driver should bind to for ``master`` (``None``: leave it to Spark, e.g. YARN)."""
    if is_local_master(master):
        return LOOPBACK
    if master.startswith("spark://"):
        first = master[len("spark://"):].partition(",")[0]  # a standby list: any master routes the same way
        host, _, port = first.partition(":")
        return routed_address(host, int(port) if port.isdigit() else DEFAULT_MASTER_PORT)
    return None
