# network_interfaces.py - this host's network interfaces and their IPv4
# addresses, for whoever must tell peers where to reach this host: the
# launcher (horovod.runner.network) and the plain-mpirun bootstrap.
"""This host's network interfaces and their IPv4 addresses."""

import fcntl
import socket
import struct
from typing import List, Optional

__all__ = ["interface_ipv4_address", "list_interfaces", "local_ipv4_addresses"]

_SIOCGIFADDR = 0x8915


def interface_ipv4_address(name: str) -> Optional[str]:
    """Returns the IPv4 address of network interface ``name``, or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def list_interfaces() -> List[str]:
    """Returns the names of this host's network interfaces."""
    return [name for _, name in socket.if_nameindex()]


def local_ipv4_addresses() -> List[str]:
    """This host's IPv4 addresses, loopback ones last, without repeats."""
    found = [a for a in (interface_ipv4_address(n) for n in list_interfaces()) if a]
    ordered = [a for a in found if not a.startswith("127.")] + [a for a in found if a.startswith("127.")]
    return list(dict.fromkeys(ordered))
