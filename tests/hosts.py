"""Hosts that share nothing but a network, made of Linux namespaces by a test and torn down after it.

Each host is a process tree in namespaces of its own (root only):

* network: one interface ``eth0`` on a bridge in a switch namespace, with an address of TEST-NET-2
  (198.51.100.0/24, RFC 5737: documentation addresses, never a real network) and its own loopback; the
  hosts find each other by name through their own ``/etc/hosts``;
* mount: its own ``/tmp`` and ``/dev/shm`` (tmpfs), its own disk at ``/mnt`` (its home; a folder of
  the test, so the test can read its logs), and everything else, the checkout and the shared data
  included, read-only; a checkout or Python environment under the test's ``/tmp`` stays at its path
  (read-only) in the host's own ``/tmp``, which is otherwise empty;
* PID and UTS: its own process numbers and host name, so that killing the namespace's first
  process kills every process of the host at once.

The test itself stays outside: it enters a host with ``nsenter`` only to start the host's commands.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "198.51.100"  # TEST-NET-2
DISK = "/mnt"  # where a host sees its own disk; also its home
PATH = f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOT = Path(__file__).resolve().parents[1]
# What a host keeps of the test's /tmp, which its own /tmp hides: the checkout, the Python environment and the
# Python it was made from, where they live under /tmp (a clone in /tmp/x), outer folders first
KEPT = sorted(
    str(p) for p in {ROOT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()} if p.is_relative_to("/tmp")
)

# Run by the first process of a host's namespaces: mounts of its own, then it waits (killing it kills the host).
SETUP = r"""
set -e
hostname "$1"
mount --bind "$2" /mnt
mount --bind "$3" /etc/hosts
# its /tmp: a tmpfs made at /dev/shm, what it keeps of the test's /tmp bound in at the same paths, moved over /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
for kept in "${@:4}"; do
  mkdir -p "/dev/shm${kept#/tmp}"
  mount --bind -o ro "$kept" "/dev/shm${kept#/tmp}"
done
mount --move /dev/shm /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -o remount,bind,ro /
ip link set lo up
echo ready
exec sleep infinity
"""


def unavailable() -> str | None:
    """Why hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "hosts of their own need Linux namespaces, which only root can make (run the test as root)"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"hosts of their own need `{tool}` (util-linux, iproute2), which is not installed"
    probe = subprocess.run(
        ["unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode:
        return f"this machine refuses new namespaces (`unshare --net --mount --uts --pid`): {probe.stderr.strip()}"
    return None


def first_child(pid: int, timeout_s: float = 10) -> int:
    """The process ``unshare --fork`` (pid) started: the first process of the new namespaces."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise TimeoutError(f"unshare (pid {pid}) started no process within {timeout_s} s")


@dataclass
class Host:
    name: str
    address: str
    disk: Path  # the test's view of the host's disk (the host sees it at /mnt)
    holder: subprocess.Popen  # `unshare`, whose child is the host's first process
    pid: int  # the host's first process, as the test sees it
    processes: list[subprocess.Popen] = field(default_factory=list)

    def command(self, args: list[str], env: dict[str, str]) -> list[str]:
        """``args`` run inside the host, in its home, with ``env`` and nothing else of the test's environment."""
        variables = {"PATH": PATH, "HOME": DISK, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **env}
        enter = ["nsenter", "-t", str(self.pid), "--net", "--mount", "--uts", "--pid"]
        home = ["bash", "-c", 'cd "$HOME" && exec "$@"', "home"]  # nsenter's --wd would be the test's /mnt
        return [*enter, "--", "env", "-i", *(f"{k}={v}" for k, v in variables.items()), *home, *args]

    def run(self, script: str, env: dict[str, str], timeout_s: float = 300) -> subprocess.CompletedProcess:
        """``bash -c script`` in the host until it ends; its output is returned and kept in the host's disk."""
        result = subprocess.run(
            self.command(["bash", "-euo", "pipefail", "-c", script], env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        with (self.disk / "commands.log").open("a") as log:
            log.write(f"$ {script}\n{result.stdout}{result.stderr}[exit {result.returncode}]\n")
        return result

    def start(self, script: str, env: dict[str, str], log: str) -> subprocess.Popen:
        """``bash -c script`` in the host in the background; its output goes to ``log`` on the host's disk."""
        with (self.disk / log).open("wb") as out:
            proc = subprocess.Popen(
                self.command(["bash", "-euo", "pipefail", "-c", script], env), stdout=out, stderr=subprocess.STDOUT
            )
        self.processes.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.disk / name).read_text(errors="replace")

    def kill(self) -> None:
        """Every process of the host, at once: the kernel kills a PID namespace with its first process."""
        if self.holder.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.holder.wait()
        for proc in self.processes:
            proc.wait()


class Network:
    """A bridge in a namespace of its own, and the hosts plugged into it; use as a context manager."""

    def __init__(self, folder: Path, names: list[str]):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.addresses = {name: f"{SUBNET}.{10 + i}" for i, name in enumerate(names)}
        self.hosts_file = folder / "etc-hosts"
        self.hosts_file.write_text("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in self.addresses.items()))
        self.hosts: dict[str, Host] = {}
        self.switch = subprocess.Popen(
            ["unshare", "--net", "bash", "-c", "echo ready; exec sleep infinity"], stdout=subprocess.PIPE, text=True
        )

    def __enter__(self) -> "Network":
        try:
            assert self.switch.stdout.readline().strip() == "ready", "the switch's namespace was not made"
            self.in_switch("ip", "link", "add", "br0", "type", "bridge")
            self.in_switch("ip", "link", "set", "br0", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for host in self.hosts.values():
            host.kill()
        self.switch.kill()
        self.switch.wait()

    def in_switch(self, *args: str) -> None:
        """``args`` in the switch's network namespace (never the machine's own)."""
        assert os.readlink(f"/proc/{self.switch.pid}/ns/net") != os.readlink("/proc/self/ns/net")
        subprocess.run(["nsenter", "-t", str(self.switch.pid), "--net", *args], check=True, capture_output=True)

    def host(self, name: str) -> Host:
        """Start host ``name``: namespaces, mounts, and its interface on the bridge."""
        disk = self.folder / name
        disk.mkdir()
        with (disk / "host.log").open("wb") as errors:  # the namespaces' own messages
            holder = subprocess.Popen(
                [
                    *("unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc"),
                    *("--propagation", "private", "bash", "-c", SETUP, "setup"),
                    *(name, str(disk), str(self.hosts_file), *KEPT),
                ],
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        assert holder.stdout.readline().strip() == "ready", (
            f"host {name} did not start: {(disk / 'host.log').read_text()}"
        )
        host = Host(name, self.addresses[name], disk, holder, first_child(holder.pid))
        self.hosts[name] = host
        assert os.readlink(f"/proc/{host.pid}/ns/net") != os.readlink("/proc/self/ns/net")
        port = f"v-{name}"[:15]
        self.in_switch("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", str(host.pid))
        self.in_switch("ip", "link", "set", port, "master", "br0", "up")
        enter = ["nsenter", "-t", str(host.pid), "--net"]
        subprocess.run([*enter, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0"], check=True)
        subprocess.run([*enter, "ip", "link", "set", "eth0", "up"], check=True)
        return host

    def unplug(self, name: str) -> None:
        """Cut ``name`` off the network (its processes keep running): frames to and from it are dropped."""
        self.in_switch("ip", "link", "set", f"v-{name}"[:15], "down")

    def plug(self, name: str) -> None:
        self.in_switch("ip", "link", "set", f"v-{name}"[:15], "up")
