"""Which address of the launcher host the workers use to reach the rendezvous store.

``--network-interfaces`` names NICs of the worker hosts (a comma list, since
hosts may name them differently); each rank uses the first listed one its own
host has.  The store is reached at the address of the first listed interface
this host has too, and otherwise -- the named network does not reach the
launcher's machine -- like without the flag: at the address the kernel routes
from towards the remote hosts (all hosts must agree, or the job fails with a
message asking for ``--network-interfaces``).  A job with only local slots uses
the loopback address.
"""

import socket
from typing import List, Optional, Sequence

from horovod.common.network_interfaces import interface_ipv4_address, list_interfaces
from horovod.runner.errors import BadInputError, HostUnreachableError

__all__ = ["interface_ipv4_address", "list_interfaces", "parse_interfaces", "rendezvous_address"]


def parse_interfaces(value: str, all_local: bool = False) -> List[str]:
    """Splits a ``--network-interfaces`` value (``eth0,ens5``).

    Raises:
        BadInputError: the list is empty, or every rank runs on this host
            (``all_local``) and it has none of the named interfaces.
    """
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise BadInputError("--network-interfaces is empty; give names such as eth0,ib0")
    known = set(list_interfaces())
    if all_local and not known.intersection(names):
        raise BadInputError(
            f"--network-interfaces: no interface named {', '.join(names)} on this host "
            f"(it has {', '.join(sorted(known))})")
    return names


def _route_source_address(hostname: str) -> str:
    try:
        infos = socket.getaddrinfo(hostname, 22, socket.AF_INET, socket.SOCK_DGRAM)
    except socket.gaierror as e:
        raise HostUnreachableError(f"cannot resolve host {hostname!r}: {e.strerror}") from None
    target = infos[0][4][0]
    # A UDP connect sends nothing; it only asks the kernel which source
    # address it would route from.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((target, 9))
        except OSError as e:
            raise HostUnreachableError(f"no route to host {hostname!r} ({target}): {e.strerror}") from None
        return s.getsockname()[0]


def rendezvous_address(remote_hosts: Sequence[str], interfaces: Optional[Sequence[str]] = None) -> str:
    """Returns the launcher address every worker can reach the rendezvous store at.

    Raises:
        BadInputError: the remote hosts are reached through different source
            addresses (and no named interface is on this host).
        HostUnreachableError: a remote host does not resolve or has no route.
    """
    for name in interfaces or ():
        address = interface_ipv4_address(name)
        if address:
            return address
    if not remote_hosts:
        return "127.0.0.1"
    addresses = {host: _route_source_address(host) for host in remote_hosts}
    distinct = set(addresses.values())
    if len(distinct) > 1:
        # Workers on different networks would each need a different address,
        # but they all share one HOROVOD_GLOO_RENDEZVOUS_ADDR.
        detail = ", ".join(f"{h} via {a}" for h, a in addresses.items())
        raise BadInputError(
            f"the remote hosts are reached from different local addresses ({detail}); "
            "choose one with --network-interfaces")
    return distinct.pop()
