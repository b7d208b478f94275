"""Simulated hosts for the reliability suite: each consumer process on a "host" of its own (a
network namespace), joined to the servers by links the test can cut.

The picture, for one :class:`Network` (``B`` is a block of addresses free on this machine)::

    root namespace (this test, Tansu, PostgreSQL)        namespace of host "a"
      hub veth: 10.250.B.1 broker, 10.250.B.2 database
      lhr<pid>l1 10.250.B+1.1/24  <== veth ==>  10.250.B+1.2  (route to 10.250.B.1: broker)
      lhr<pid>l2 10.250.B+2.1/24  <== veth ==>  10.250.B+2.2  (route to 10.250.B.2: database)

Every host has one veth pair per server it reaches (``broker``, ``database``), so a fault can
cut one and not the other, as a firewall between two machines would. The servers listen on the
hub's addresses, which stay up whatever link is cut (the test's own clients use them too).
:meth:`Network.cut` sets the root end of a link down: the host's packets are dropped, not
refused (its end keeps its routes, so TCP retransmits and connects hang), which is what a real
partition looks like. :meth:`Network.heal` sets it up again.

Every address is in ``10.250.0.0/16``, on veths this module creates; nothing leaves the
machine. Names carry the test process's pid (``lhr-<pid>-<n>`` namespaces, ``lhr<pid>…``
links), so a crashed earlier run cannot collide, and :func:`remove_stale` removes those of dead
processes. :func:`network` removes everything it made, also on failure.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from consumers.dev.embedded.tansu import TansuBroker, tansu_binary
from tests.helpers import wait_until
from tests.postgres import PostgresServer, start_postgres
from tests.support.processes import REPO

Server = Literal["broker", "database"]
SERVERS: tuple[Server, ...] = ("broker", "database")

PREFIX = "lhr"
#: Namespaces ``lhr-<pid>-<n>``; links ``lhr<pid>l<n>`` (root end) and ``lhr<pid>p<n>`` (peer).
_NETNS = re.compile(rf"^{PREFIX}-(\d+)-\d+$")
_LINK = re.compile(rf"^{PREFIX}(\d+)[hgpl]\d+$")
#: Addresses: 10.250.(16*block + k).0/24, k = 0 for the hub, 1..15 for links.
_RANGE = ipaddress.ip_network("10.250.0.0/16")
_BLOCKS = 16
_counter = itertools.count()


class NetnsUnavailableError(RuntimeError):
    """``ip netns add`` is not permitted here (not root, or no ``ip``)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def remove_stale() -> list[str]:
    """Remove the namespaces and links of runs whose process is gone; returns their names."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        found = _NETNS.match(name)
        if found and not _alive(int(found[1])):
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        found = _LINK.match(name)
        # One end removes the pair: the other is then gone already.
        if (
            found
            and not _alive(int(found[1]))
            and _ip("link", "del", name, check=False).returncode == 0
        ):
            removed.append(name)
    return removed


def check_netns() -> None:
    """Raise :class:`NetnsUnavailableError` unless this process may create namespaces."""
    if shutil.which("ip") is None:
        raise NetnsUnavailableError("the ip command (iproute2) is not installed")
    probe = f"{PREFIX}-{os.getpid()}-{next(_counter)}"
    result = _ip("netns", "add", probe, check=False)
    if result.returncode != 0:
        raise NetnsUnavailableError(
            f"ip netns add is not permitted here ({result.stderr.strip()}): run as root"
        )
    _ip("netns", "del", probe, check=False)


def _used_blocks() -> set[int]:
    """Blocks of ``10.250.0.0/16`` with an address on any interface of this namespace."""
    used = set()
    for line in _ip("-o", "-4", "addr", "show", check=False).stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            address = ipaddress.ip_interface(parts[parts.index("inet") + 1]).ip
            if address in _RANGE:
                used.add(address.packed[2] // _BLOCKS)
    return used


@dataclass
class Host:
    """A consumer machine: a namespace, and one link per server (the root end's name)."""

    name: str
    netns: str
    links: dict[Server, str] = field(default_factory=dict)
    addresses: dict[Server, str] = field(default_factory=dict)

    def command(self, *argv: str) -> list[str]:
        """``argv`` run on this host."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass
class Network:
    """Hosts joined to the hub; see the module docstring."""

    tag: str
    block: int
    hub_link: str
    hosts: dict[str, Host] = field(default_factory=dict)
    _links: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def address(self, server: Server) -> str:
        """Where ``server`` listens: a hub address every host reaches over its own link."""
        return self._subnet(0, SERVERS.index(server) + 1)

    def _subnet(self, k: int, host: int) -> str:
        return f"10.250.{self.block * _BLOCKS + k}.{host}"

    def add_host(self, name: str) -> Host:
        """A new namespace with one link to each server, every link up."""
        netns = f"{self.tag}-{next(_counter)}"
        _ip("netns", "add", netns)
        host = self.hosts[name] = Host(name, netns)

        def inside(*args: str) -> None:
            _ip("-n", netns, *args)

        inside("link", "set", "lo", "up")
        for server in SERVERS:
            k = next(self._links)
            if k >= _BLOCKS:
                raise RuntimeError(f"a network has room for {_BLOCKS - 1} links")
            outer, inner = self._link_name("l", k), self._link_name("p", k)
            gateway, address = self._subnet(k, 1), self._subnet(k, 2)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            host.links[server], host.addresses[server] = outer, address
            _ip("link", "set", inner, "netns", netns)
            _ip("addr", "add", f"{gateway}/24", "dev", outer)
            _ip("link", "set", outer, "up")
            inside("addr", "add", f"{address}/24", "dev", inner)
            inside("link", "set", inner, "up")
            inside("route", "add", f"{self.address(server)}/32", "via", gateway)
            # The gateway's hardware address is known for good: with the link cut, a connect
            # then hangs as across a real partition, instead of failing on an unanswered ARP.
            mac = Path(f"/sys/class/net/{outer}/address").read_text().strip()
            inside("neigh", "replace", gateway, "lladdr", mac, "dev", inner, "nud", "permanent")
        return host

    def _link_name(self, role: str, k: int) -> str:
        name = f"{PREFIX}{os.getpid()}{role}{self.block}{k:02d}"
        if len(name) > 15:  # the kernel's limit (IFNAMSIZ)
            raise RuntimeError(f"link name {name!r} is too long")
        return name

    def cut(self, host: Host, *servers: Server) -> None:
        """Drop every packet between ``host`` and ``servers`` (all of them when none named)."""
        for server in servers or SERVERS:
            _ip("link", "set", host.links[server], "down")

    def heal(self, host: Host, *servers: Server) -> None:
        """Undo :meth:`cut`: the link is up and its route back."""
        for server in servers or SERVERS:
            _ip("link", "set", host.links[server], "up")

    def remove(self) -> None:
        """Every namespace (its ends of the links go with it) and the hub."""
        for host in self.hosts.values():
            _ip("netns", "del", host.netns, check=False)
            for link in host.links.values():
                _ip("link", "del", link, check=False)  # already gone with the peer
        _ip("link", "del", self.hub_link, check=False)


@contextlib.contextmanager
def network() -> Iterator[Network]:
    """A hub with the two server addresses up, in a block of addresses no interface uses;
    every namespace and link it makes is removed on the way out, also on failure."""
    check_netns()
    remove_stale()
    free = [b for b in range(_BLOCKS) if b not in _used_blocks()]
    if not free:
        raise RuntimeError("every block of 10.250.0.0/16 is in use")
    block = free[0]
    # The hub: a veth pair with both ends here, up whatever else is cut.
    hub, peer = f"{PREFIX}{os.getpid()}h{block}", f"{PREFIX}{os.getpid()}g{block}"
    net = Network(tag=f"{PREFIX}-{os.getpid()}", block=block, hub_link=hub)
    try:
        _ip("link", "add", hub, "type", "veth", "peer", "name", peer)
        for server in SERVERS:
            _ip("addr", "add", f"{net.address(server)}/32", "dev", hub)
        _ip("link", "set", hub, "up")
        _ip("link", "set", peer, "up")
        yield net
    finally:
        net.remove()


# ---------------------------------------------------------------------------- servers


class HubTansu(TansuBroker):
    """A Tansu broker listening on a hub address (clients on every host reach it there)."""

    def __init__(self, process: subprocess.Popen[bytes], host: str, port: int, log: Path) -> None:
        super().__init__(process, port, "memory://", log, None)
        self.host = host

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def start_tansu_on(host: str, log_dir: Path, timeout: float = 10.0) -> HubTansu:
    """Tansu (memory storage) listening and advertised on ``host``; stop it with ``.stop()``."""
    port = _free_port(host)
    url = f"tcp://{host}:{port}"
    cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
    cmd += ["--storage-engine", "memory://"]
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"tansu-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"},
        )
    broker = HubTansu(process, host, port, log_path)
    try:
        wait_until(
            lambda: not broker.alive() or _accepts(host, port),
            timeout,
            message=f"Tansu listening on {broker.bootstrap}",
        )
        if not broker.alive():
            raise RuntimeError(f"Tansu exited {broker.returncode}:\n{broker.log_tail()}")
        AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5)
    except (AssertionError, RuntimeError, KafkaException):
        broker.kill()
        raise
    return broker


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class HubPostgres(PostgresServer):
    """A :class:`PostgresServer` listening on a hub address, reachable from every host."""

    listen: str = "127.0.0.1"

    @property
    def host(self) -> str:
        return self.listen

    @property
    def uri(self) -> str:
        return f"postgresql://{self.user}@{self.listen}:{self.port}/{self.database}"

    def sqlalchemy_url_for(self, database: str) -> str:
        return f"postgresql+psycopg2://{self.user}@{self.listen}:{self.port}/{database}"

    def start(self) -> None:
        options = (
            f"-h {self.listen} -p {self.port} -k {self.data_dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._pg_ctl("-w", "-t", "30", "-l", str(self.log_file), "-o", options, "start")


def start_postgres_on(host: str, base_dir: Path) -> HubPostgres:
    """A fresh PostgreSQL listening on ``host`` that lets the hosts of ``10.250.0.0/16`` in."""
    first = start_postgres(base_dir)  # initdb, and a first start on loopback
    first.stop()
    with (first.data_dir / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {_RANGE} trust\n")
    server = HubPostgres(
        first.base_dir, _free_port(host), first.system_user, home=first.home, listen=host
    )
    server.start()
    return server


# ---------------------------------------------------------------------------- consumers


@dataclass
class Replica:
    """A ``lanehouse consume`` process on a host: its records file and its log."""

    host: Host
    process: subprocess.Popen[bytes]
    run: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, timeout: float = 60, *, signalled: bool = False) -> int:
        """SIGTERM (drain, commit, leave; unless ``signalled`` already: a second one exits at
        once), then SIGKILL after ``timeout``; the exit status."""
        if not signalled and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=30)


def start_replica(
    host: Host,
    spec: Path,
    run: Path,
    delay: float,
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> Replica:
    """``lanehouse consume`` of ``spec`` on ``host`` (its handler records to ``run``; see
    ``tests/support/processes.py``). Its output goes to a file beside ``run``: a pipe
    nobody reads fills and blocks the process, which would look like a stall."""
    log = run.with_suffix(".log")
    environment = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": str(REPO),
        "LH_RECORD_FILE": str(run),
        "LH_DELAY": str(delay),
    }
    argv = [sys.executable, "-m", "orchestration.cli", "consume", str(spec), *extra]
    with log.open("ab") as out:
        process = subprocess.Popen(
            host.command(*argv),
            cwd=REPO,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Replica(host, process, run, log)
