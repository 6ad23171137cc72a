"""A real Kubernetes node for tests: kubelet (1.37; 1.33 with GCU_KUBERNETES=oldest) + a containerd of its own, in namespaces of its own.

Pods really run here (runc containers from images imported into the node's containerd),
next to the simulated kwok nodes of :mod:`devtools.localcluster`::

    with RealNode(tmp_path / "node", "gcu-real-1", cluster.kubeconfig,
                  ca_cert=..., ca_key=..., labels={"enflame.com/gcu.present": "true"}) as node:
        node.import_image(dockerd, "artifact.enflame.cn/.../gcu-plugin:fake-gcu")
        ...                           # the node is Ready; pods scheduled to it run

    RealNode.for_cluster(cluster, tmp_path / "node", "gcu-real-1", labels=...)   # the same, CA from LocalCluster

What the node is made of (everything it writes lives under ``workdir``):

* **Network namespace** ``gcurn-<name>`` (``ip netns add``), joined to the machine's by a
  veth pair: ``grn<hash>`` (10.234.I.1/30) here, ``eth0`` (10.234.I.2, the node's
  InternalIP) there. containerd, the kubelet, the CNI bridge ``cni0`` (pods get
  10.233.I.0/24), hostNetwork pods and the kubelet's ports all live in it, so nothing
  lands in the machine's own network namespace but that one veth end and a route to
  the pod subnet (the API server reaches the kubelet, for logs/exec, over the veth). The
  kubelet is in there too, so its probes reach pod IPs and hostNetwork pods like on a
  real node. The API server (loopback of the machine) is reached through a small
  forwarder (``agent`` below) listening *inside* the namespace on the kubeconfig's
  ``127.0.0.1:<port>``, on the ``kubernetes`` Service IP (``10.96.0.1:443``) and on the
  address the API server advertises (the Service's endpoint, where kube-proxy sends it).
* **kube-proxy** of the same Kubernetes version, iptables mode, in that network namespace:
  ClusterIP Services and NodePorts (on the node's address) work in the node as on a real one,
  and its rules live and die with the namespace (the machine's iptables are not touched; no
  conntrack limit or timeout is set). It authenticates as ``system:kube-proxy``, the user the
  default RBAC gives the proxier's role.
* **Mount namespace** (private, held by a ``sleep`` process): the kubelet and containerd
  share it. In it, ``/var/lib`` is ``workdir/var-lib`` (so the kubelet's root dir is the
  ordinary ``/var/lib/kubelet`` and the device-plugin directory the project's DaemonSet
  mounts, ``/var/lib/kubelet/device-plugins``, is this node's), ``/var/log`` is
  ``workdir/var-log`` (pod logs, ``/var/log/containers``), ``/run`` is a tmpfs, with
  ``/run/containerd`` = ``workdir/run-containerd`` (socket, pid file, shim sockets, runc
  state) and ``/etc/containerd`` = ``workdir/containerd`` (config.toml, conf.d/): containerd
  is where a node has it, for the toolkit's defaults; ``/usr/local/enflame``, where the toolkit
  installs the runtime, is ``workdir/usr-local-enflame`` (``/usr/local`` is an overlay whose
  writes go to ``workdir/usr-local``); ``/usr/lib`` is an overlay too (``workdir/usr-lib``), with the
  ``/lib/modules`` a node has (this machine has none). ``/dev`` is a tmpfs with the usual
  devices (null, zero, kmsg, pts, ...) and the stand-in GCUs ``/dev/gcu<N>`` (``fake_gcus``),
  so pods that mount the host's /dev (device plugin, exporter, driver) see the node's, and
  whatever they create there stays in the node. With stand-in GCUs, ``/sys/bus/pci/devices`` is the node's own
  too: one PCI device of Enflame's vendor id (1e36) per GCU, which is how the real NFD finds them. Every mount the kubelet and containerd make
  (secret/token tmpfs, rootfs binds, the kubelet's rshared root) is in that namespace and
  goes away with it, so the machine's mount table never sees them. The machine's
  ``/var/lib/kubelet`` is not touched, and several real nodes can run side by side.
  Six kernel tunables the kubelet would otherwise set machine-wide (``kernel.panic``,
  ``vm.overcommit_memory``, ...) are shadowed in that namespace by files holding the
  values it wants, so it writes none of them.
* **containerd** 2 (built from ``devtools/containerd2`` by kube.sh; config ``version = 3``), or
  Debian's 1.6 with ``GCU_NODE_CONTAINERD=1.6`` (``version = 2``): own config, root, state, gRPC socket
  (``/run/containerd/containerd.sock`` in the node, ``containerd_socket`` here), CRI with
  ``restrict_oom_score_adj``, ``disable_apparmor``, the ``overlayfs`` snapshotter, NRI off,
  a local sandbox image (static busybox that sleeps; made here, no registry),
  CNI ``bridge`` + ``host-local`` + ``loopback`` from ``/usr/lib/cni``, pod network
  namespaces under its state dir, and ``imports = ["/etc/containerd/conf.d/*.toml"]``. It runs
  under a restart-always loop (a service, as systemd would run it): containerd does not
  reload its config, so runtime activation stops it (``restart_containerd()`` here, or from a
  hostPID pod ``kill $(cat /run/containerd/containerd.pid)``) and it comes back; containers
  keep running.
* **PID namespace**: containerd (and so its shims and every container) runs in a PID namespace of
  the node's own, with its own ``/proc``, in a mount namespace under the node's that receives every
  mount the node makes later (the kubelet's volumes). A hostPID pod (the driver, the toolkit) sees the
  node's containerd, shims and containers, as on a machine of its own, not every node's on this
  machine; its pid file holds the pid there (``containerd_pid()`` gives this machine's). The kubelet
  and kube-proxy stay in the machine's.
* **kubelet** ``K8S_VERSION`` (``~/.cache/gcu-stack/kubernetes-<version>/bin/kubelet``): the settings of
  REFERENCE.md §5, a client certificate ``system:node:<name>`` signed by the cluster CA
  when ``ca_key`` is given (else the kubeconfig as it is), labels through
  ``--node-labels`` (``*.kubernetes.io`` ones, which a kubelet may not set, through the API)
  and taints through ``registerWithTaints``. Image garbage collection is off, so imported
  images stay.

**Cleanup** (``stop()``, ``down``, and the agent when the Python process that started the
node dies): the kubelet, kube-proxy, every container (descendants of this containerd's shims, and
anything left in the cgroups of its containers), the shims, containerd, the holder and
anything else inside the network or mount namespace are killed; the mount namespace dies
with them (taking every mount made in it); the containers' cgroups are removed; the
network namespace, veth and route go; ``/run/netns`` (which ``ip netns add`` makes a mount) is
unmounted again by the last real node when a real node made it; the Node object is deleted (optional). ``leftovers()`` lists anything
still there; tests assert it is empty. Node names are unique per machine: starting a node whose
name is taken by a running one (its kubelet is alive) is an error; leftovers of a dead one (a
run killed so hard that its agent died too) are removed first, found by the network namespace.

CLI (detached; for ``scripts/gcu-stack``)::

    python -m devtools.realnode up --state-dir D --kubeconfig K --name N [--label k=v] [--taint k=v:NoSchedule]
                                   [--fake-gcus 4]
    python -m devtools.realnode import-image --state-dir D --docker-host unix:///.../docker.sock REF [REF...]
    python -m devtools.realnode status --state-dir D
    python -m devtools.realnode down --state-dir D [--keep-node-object]
    python -m devtools.realnode leftovers --state-dir D      # exit 1 if anything of the node is left
    python -m devtools.realnode sweep                        # remove abandoned nodes (killed runs and agents)

``up`` prints one JSON object on stdout (name, node IP, containerd address, device-plugin
directory, ...). Requires root (namespaces, mounts, mknod).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

from devtools import (
    CACHE_DIR,
    PROJECT_DIR,
    TOOLCHAIN_HINT,
    ComponentFailed,
    StartStop,
    ToolchainMissing,
    built_module,
    exit_codes,
    kill_pid,
    kubeapi,
    kubernetes_version,
    log_tail,
    mountpoints,
    mounts_under,
    overlay_mount_error,
    owner,
    owner_alive,
    pid_alive,
    spawn,
    write_json,
)

K8S_VERSION = kubernetes_version()   # devtools/go/go.mod (GCU_KUBERNETES, GCU_K8S_VERSION)
# The nodes' containerd: "2" (config version 3; built from devtools/containerd2 by kube.sh) or "1.6" (Debian's,
# config version 2), each with the config format its version reads.
NODE_CONTAINERD = os.environ.get("GCU_NODE_CONTAINERD", "2")
# Per choice: the config version that containerd reads, and how to install it when it is missing.
NODE_CONTAINERDS = {"2": (3, f"{TOOLCHAIN_HINT} (it builds containerd 2 from devtools/containerd2)"),
                    "1.6": (2, "apt-get install containerd")}

# Every real node carries it (the kubelet sets it): what pins a workload to a node where pods really run, the cluster
# having simulated nodes beside them.
REAL_NODE_LABEL = "gcu-stack.dev/real-node"
# A stand-in GCU as NFD's PCI source reads it from /sys/bus/pci/devices/<address>/ (the node's own; see
# _fake_pci_devices): Enflame's vendor id, a processing accelerator's class (0x12).
FAKE_GCU_PCI = {"vendor": "0x1e36", "device": "0xc033", "class": "0x120000",
                "subsystem_vendor": "0x1e36", "subsystem_device": "0x0001"}

NETNS_PREFIX = "gcurn-"
LINK_PREFIX = "grn"
LINK_NET = "10.234.{i}.{host}"       # /30 per node: .1 this machine, .2 the node
POD_NET = "10.233.{i}"               # /24 per node, on the node's cni0 bridge
POD_CIDR_ALL = "10.233.0.0/16"       # every real node's pods (kube-proxy's clusterCIDR)
KUBE_PROXY_HEALTHZ_PORT = 10256
CLUSTER_DNS_IP = "10.96.0.10"            # kubeadm's kube-dns Service address in the 10.96.0.0/16 Service range
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT = 10250
PAUSE_REPOSITORY = "gcu-stack.local/realnode-pause"
K8S_NAMESPACE = "k8s.io"             # containerd namespace the CRI plugin uses
NODE_RUN_CONTAINERD = "/run/containerd"    # inside the node: the usual place (socket, pid file, shim sockets)
NODE_CONTAINERD_SOCKET = f"{NODE_RUN_CONTAINERD}/containerd.sock"
# What the kubelet would set machine-wide (pkg/kubelet/cm setupKernelTunables), shadowed in the node.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10", "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
}
# Paths the kubelet/containerd would create on a host, kept inside the node; leftovers() checks them.
HOST_PATHS_KEPT_INSIDE = ("/var/lib/kubelet", "/var/lib/cni", "/var/log/pods", "/var/log/containers",
                          "/run/containerd", "/opt/containerd", "/var/lib/containerd",
                          "/usr/libexec/kubernetes", "/dev/termination-log", "/dev/gcu0", "/usr/local/enflame")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
# The node's own /dev: (name, mode, major, minor); kmsg for the kubelet's OOM watcher
NODE_DEVICES = (("null", "666", 1, 3), ("zero", "666", 1, 5), ("full", "666", 1, 7), ("random", "666", 1, 8),
                ("urandom", "666", 1, 9), ("tty", "666", 5, 0), ("kmsg", "644", 1, 11))
# What runs in the node's namespaces besides containers (teardown's roots)
NODE_PROGRAMS = {"containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "busybox", "runc", "nsenter", "unshare", "sh"}
# In the environment of every process the node starts (value: its netns name), inherited by containerd's shims
NODE_MARKER = "GCU_REALNODE"
_CLONE_NEWNET = 0x40000000
_LOCK = CACHE_DIR / "realnode.lock"
_RUN_NETNS_MARKER = CACHE_DIR / "realnode-made-run-netns"
_CGROUP_MARKER = CACHE_DIR / "realnode-made-k8s-cgroups"
# <name>.json per node being started or running: the process starting it and its workdir. Machine-wide (a killed
# session ran in another folder than the next run), so sweep_stale tells a node still starting from a dead one.
_OWNERS = CACHE_DIR / "realnodes"


# Sweeps of real nodes, one process at a time: in /run/lock rather than CACHE_DIR because a sweeper may have another
# GCU_CACHE_DIR (scripts/gcu-stack under the tests) and then sees no owner record. Not _LOCK: teardown takes that.
_SWEEP_LOCK = Path("/run/lock" if os.path.isdir("/run/lock") else "/run") / "gcu-stack-realnode-sweep.lock"
_sweep_held = threading.local()


@contextlib.contextmanager
def sweep_lock() -> Iterator[None]:
    """While held, no other process sweeps real nodes (sweep_stale takes it; re-entrant within a thread). Whoever
    makes a node abandoned on purpose and sweeps it itself (a test) holds it in between, or another sweep takes it."""
    if getattr(_sweep_held, "depth", 0):
        _sweep_held.depth += 1
        try:
            yield
        finally:
            _sweep_held.depth -= 1
        return
    try:   # read-only: a lock another user made can be taken too (flock needs no write access)
        fd = os.open(_SWEEP_LOCK, os.O_RDONLY)
    except FileNotFoundError:
        fd = os.open(_SWEEP_LOCK, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _sweep_held.depth = 1
        yield
    finally:
        _sweep_held.depth = 0
        os.close(fd)


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """What real nodes change on the machine itself, one process at a time (released when the file closes)."""
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class RealNodeError(ComponentFailed):
    """The real node could not start (message names the node, the file and what to do)."""


# --------------------------------------------------------------------------- toolchain

CONTAINERD2_MODULE = ("containerd2", "github.com/containerd/containerd/v2")


def containerd2_version() -> str:
    """The containerd 2 version scripts/toolchain/kube.sh builds: devtools/containerd2/go.mod's requirement."""
    return built_module(*CONTAINERD2_MODULE)[0]


def containerd2_bin_dir() -> Path:
    """kube.sh's containerd 2 build (containerd, ctr, the runc shim)."""
    return built_module(*CONTAINERD2_MODULE)[1]


def _exe(candidates: Iterable[str]) -> Optional[str]:
    for c in candidates:
        if not c:
            continue
        p = c if os.path.isabs(c) else shutil.which(c)
        if p and os.access(p, os.X_OK):
            return p
    return None


def node_containerd() -> tuple[int, str]:
    """GCU_NODE_CONTAINERD's (config version, fix when missing); a choice that is neither 2 nor 1.6 is refused."""
    if NODE_CONTAINERD not in NODE_CONTAINERDS:
        raise ToolchainMissing(f"GCU_NODE_CONTAINERD={NODE_CONTAINERD!r}: say 2 (containerd {containerd2_version()}, "
                               "built by scripts/toolchain.sh kube) or 1.6 (Debian's containerd package)")
    return NODE_CONTAINERDS[NODE_CONTAINERD]


def containerd_candidates(binary: str) -> list[str]:
    """Where the node's containerd, ctr and runc shim come from: kube.sh's containerd 2 build, or Debian's 1.6."""
    if NODE_CONTAINERD == "2":
        return [str(containerd2_bin_dir() / binary)]
    return [f"/usr/bin/{binary}", binary]


def find_toolchain() -> dict:
    """kubelet, containerd (+ctr, shim, runc), CNI plugins, iproute2, util-linux, a static busybox, openssl."""
    kube_dir = Path(os.environ.get("GCU_KUBE_BIN_DIR") or CACHE_DIR / f"kubernetes-{K8S_VERSION}" / "bin")
    _, containerd_fix = node_containerd()
    found = {
        "kubelet": _exe([os.environ.get("GCU_KUBELET_BIN", ""), str(kube_dir / "kubelet")]),
        "kube-proxy": _exe([os.environ.get("GCU_KUBE_PROXY_BIN", ""), str(kube_dir / "kube-proxy")]),
        "iptables": _exe(["/usr/sbin/iptables", "/sbin/iptables", "iptables"]),
        **{b: _exe(containerd_candidates(b)) for b in ("containerd", "ctr", "containerd-shim-runc-v2")},
        "runc": _exe(["/usr/sbin/runc", "/usr/bin/runc", "runc"]),
        "ip": _exe(["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "ip"]),
        "nsenter": _exe(["/usr/bin/nsenter", "nsenter"]),
        "unshare": _exe(["/usr/bin/unshare", "unshare"]),
        "mount": _exe(["/usr/bin/mount", "/bin/mount", "mount"]),
        "umount": _exe(["/usr/bin/umount", "/bin/umount", "umount"]),
        "busybox": _exe(["/bin/busybox", "/usr/bin/busybox"]),
        "openssl": _exe(["openssl"]),
    }
    cni_dir = Path(os.environ.get("GCU_CNI_BIN_DIR") or "/usr/lib/cni")
    fixes = {"kubelet": f"{TOOLCHAIN_HINT} (it builds kubelet {K8S_VERSION} into {kube_dir})",
             "kube-proxy": f"{TOOLCHAIN_HINT} (it builds kube-proxy {K8S_VERSION} into {kube_dir})",
             "iptables": "apt-get install iptables",
             **dict.fromkeys(("containerd", "ctr", "containerd-shim-runc-v2"), containerd_fix),
             "runc": "apt-get install runc",
             "ip": "apt-get install iproute2", "nsenter": "apt-get install util-linux",
             "unshare": "apt-get install util-linux", "mount": "apt-get install mount",
             "umount": "apt-get install mount", "busybox": "apt-get install busybox-static",
             "openssl": "apt-get install openssl"}
    missing = [f"{k} ({fixes[k]})" for k, v in found.items() if not v]
    missing += [f"CNI plugin {cni_dir / p} (apt-get install containernetworking-plugins)"
                for p in CNI_PLUGINS if not os.access(cni_dir / p, os.X_OK)]
    if missing:
        raise ToolchainMissing("real node toolchain incomplete, missing: " + "; ".join(missing))
    found["cni_dir"] = str(cni_dir)
    return found


# --------------------------------------------------------------------------- containerd's configuration

def containerd_config_text(version: int, *, root: Path, state: Path, opt: Path, imports: str, pause_ref: str,
                           snapshotter: str, cni_bin_dir: str, cni_conf_dir: Path, registry_hosts: Path) -> str:
    """The node's config.toml: the same settings in containerd 1.6's format (``version = 2``, one CRI plugin) or
    containerd 2's (``version = 3``: the CRI split into runtime, images and the gRPC server's own settings).
    `registry_hosts`: the directory of per-registry ``hosts.toml`` files (RealNode.mirror), read at each pull."""
    head = f"""version = {version}
root = "{root}"
state = "{state}"
imports = ["{imports}"]
oom_score = 0
disabled_plugins = [{'"io.containerd.snapshotter.v1.aufs", ' if version == 2 else ""}"io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{NODE_CONTAINERD_SOCKET}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
"""
    runtime_settings = """restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true"""
    runtimes = ('default_runtime_name = "runc"\n'
                '    [{section}.containerd.runtimes.runc]\n'
                '      runtime_type = "io.containerd.runc.v2"')
    if version == 2:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return head + f"""
[{cri}]
  sandbox_image = "{pause_ref}"
  {runtime_settings}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "{snapshotter}"
    {runtimes.format(section=cri)}
  [{cri}.cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{cni_conf_dir}"
    max_conf_num = 1
  [{cri}.registry]
    config_path = "{registry_hosts}"
"""
    runtime, images = 'plugins."io.containerd.cri.v1.runtime"', 'plugins."io.containerd.cri.v1.images"'
    return head + f"""
[{runtime}]
  {runtime_settings}
  [{runtime}.containerd]
    {runtimes.format(section=runtime)}
  [{runtime}.cni]
    bin_dirs = ["{cni_bin_dir}"]
    conf_dir = "{cni_conf_dir}"
    max_conf_num = 1

[{images}]
  snapshotter = "{snapshotter}"
  [{images}.pinned_images]
    sandbox = "{pause_ref}"
  [{images}.registry]
    config_path = "{registry_hosts}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

# NRI (on by default in containerd 2) would put its socket in the machine's /var/run/nri: no plugin here uses it
[plugins."io.containerd.nri.v1.nri"]
  disable = true
"""


# --------------------------------------------------------------------------- small helpers

def _run(argv: Sequence[Any], *, check: bool = True, input: Optional[Union[str, bytes]] = None,
         timeout: float = 120, what: str = "") -> subprocess.CompletedProcess:
    text = not isinstance(input, bytes)
    r = subprocess.run([str(a) for a in argv], input=input, capture_output=True, text=text, timeout=timeout)
    if check and r.returncode != 0:
        err = r.stderr if text else r.stderr.decode(errors="replace")
        raise RealNodeError(f"{what + ': ' if what else ''}command failed ({r.returncode}): "
                            f"{' '.join(map(str, argv))}\n{err.strip()}")
    return r


def netns_name(name: str) -> str:
    return NETNS_PREFIX + name


def link_name(name: str) -> str:
    return LINK_PREFIX + hashlib.sha1(name.encode()).hexdigest()[:8]


def _ns_inode(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _proc_ns(pid: int, kind: str) -> Optional[int]:
    return _ns_inode(f"/proc/{pid}/ns/{kind}")


def _environ_has(pid: int, entry: str) -> bool:
    """Whether the process's environment holds `entry` ("NAME=value"); False once it is gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry.encode() in f.read().split(b"\0")
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _stat_after_name(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields after the command name (state, ppid, ...); [] once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _process_state(pid: int) -> str:
    """The state letter (R, S, D, T, Z...); "" once the process is gone."""
    fields = _stat_after_name(pid)
    return fields[0] if fields else ""


def _ppid(pid: int) -> Optional[int]:
    fields = _stat_after_name(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _nspid(pid: int) -> list[str]:
    """The pids a process has in each PID namespace it is in, this machine's first (its NSpid)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return []
    return next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])


def _outer_pid(ancestor: Optional[int], inner: int) -> Optional[int]:
    """This machine's pid of the process `inner` of the PID namespace `ancestor`'s children were made in (`unshare
    --pid --fork`): its NSpid names `inner` at that namespace's level (a container's own namespace may be nested in
    it), and `ancestor` is among its forebears (other nodes' namespaces use the same numbers)."""
    level = len(_nspid(ancestor)) if ancestor else 0
    if not level:
        return None
    for pid in _all_pids():
        nspid = _nspid(pid)
        if len(nspid) > level and nspid[level] == str(inner):
            forebear: Optional[int] = pid
            while forebear and forebear != ancestor:
                forebear = _ppid(forebear)
            if forebear == ancestor:
                return pid
    return None


def _record_owner(name: str, workdir: Path) -> None:
    write_json(_OWNERS / f"{name}.json", {**owner(os.getpid()), "workdir": str(workdir)})


def _owner_record(name: str) -> Optional[dict]:
    try:
        return json.loads((_OWNERS / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid and pid not in out:
        out.add(pid)
        pid = _ppid(pid) or 0
    return out


def _is_mountpoint(path: str) -> bool:
    return path in mountpoints()


def _cgroup_roots() -> list[Path]:
    """Mount points of the cgroup v1 hierarchies (and the v2 one)."""
    roots = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[0] in ("cgroup", "cgroup2"):
                roots.append(Path(left.split()[4]))
    return roots


def _setns(path: str) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns({path}): {os.strerror(e)}")
    finally:
        os.close(fd)


def parse_taint(text: str) -> dict:
    """"key=value:Effect" or "key:Effect" -> a taint dict."""
    m = re.fullmatch(r"([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)", text)
    if not m:
        raise ValueError(f"taint {text!r}: expected key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
    taint = {"key": m.group(1), "effect": m.group(3)}
    if m.group(2) is not None:
        taint["value"] = m.group(2)
    return taint


def _kubelet_may_set(label: str) -> bool:
    """The kubelet refuses --node-labels in the kubernetes.io / k8s.io namespaces but these."""
    prefix = label.split("/", 1)[0] if "/" in label else ""
    restricted = any(prefix == d or prefix.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    if not restricted:
        return True
    allowed = {"kubernetes.io/hostname", "kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch",
               "beta.kubernetes.io/instance-type", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
               "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
               "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "node.kubernetes.io/instance-type"}
    return label in allowed or prefix in ("kubelet.kubernetes.io", "node.kubernetes.io") or \
        prefix.endswith(".kubelet.kubernetes.io") or prefix.endswith(".node.kubernetes.io")


# --------------------------------------------------------------------------- kubeconfig / API

class KubeApi:
    """The node's view of a kubeconfig: the API server and the credentials the kubelet's own kubeconfig is made from,
    and requests by path through devtools/kubeapi.py."""

    def __init__(self, kubeconfig: Union[str, Path]):
        self.path = Path(kubeconfig)
        try:
            text = self.path.read_text()
        except OSError as e:
            raise RealNodeError(f"cannot read the kubeconfig {self.path}: {e}") from e
        try:
            cfg = json.loads(text)
        except ValueError:
            try:
                import yaml  # type: ignore
            except ImportError:
                raise RealNodeError(f"{self.path} is not JSON and PyYAML is not installed to read it as YAML") from None
            cfg = yaml.safe_load(text)
        ctx_name = cfg.get("current-context")
        contexts = {c["name"]: c["context"] for c in cfg.get("contexts") or []}
        ctx = contexts.get(ctx_name) or (next(iter(contexts.values())) if contexts else {})
        clusters = {c["name"]: c["cluster"] for c in cfg.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in cfg.get("users") or []}
        self.cluster = clusters.get(ctx.get("cluster")) or (next(iter(clusters.values())) if clusters else {})
        self.user = users.get(ctx.get("user")) or {}
        self.server = self.cluster.get("server") or ""
        if not self.server.startswith("https://"):
            raise RealNodeError(f"{self.path}: the real node needs an https API server, found server {self.server!r}")
        self._client: Optional[kubeapi.KubeApi] = None
        u = urllib.parse.urlparse(self.server)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 443

    def _rel(self, p: str) -> str:
        return str(p if os.path.isabs(p) else self.path.parent / p)

    def ca_pem(self) -> bytes:
        if self.cluster.get("certificate-authority-data"):
            return base64.b64decode(self.cluster["certificate-authority-data"])
        if self.cluster.get("certificate-authority"):
            return Path(self._rel(self.cluster["certificate-authority"])).read_bytes()
        return b""

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 15,
                content_type: str = "application/json") -> Any:
        """A request through devtools' one Kubernetes client (devtools/kubeapi.py), with this kubeconfig's credentials."""
        if self._client is None:
            self._client = kubeapi.KubeApi.from_kubeconfig(self.path)
        try:
            return self._client.request(method, path, body, timeout=timeout, content_type=content_type)
        except kubeapi.ApiError as error:
            err = RealNodeError(f"{method} {path} -> HTTP {error.status}: {error.body[:400]}")
            err.status = error.status  # type: ignore[attr-defined]
            raise err from None

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def node_ready(node: Mapping) -> bool:
    conds = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    taints = (node.get("spec") or {}).get("taints") or []
    return conds.get("Ready") == "True" and not any(
        t.get("key") in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable") for t in taints)


# --------------------------------------------------------------------------- sandbox image

def sandbox_image_archive(busybox: str) -> tuple[Path, str]:
    """A docker-save archive of a static-busybox image whose entrypoint sleeps (TERM ends it); cached.

    Made here (no registry, no dockerd): one layer, the busybox root filesystem of devtools/dockerd.py.
    """
    from devtools.dockerd import busybox_rootfs_tar

    return one_layer_image_archive(
        PAUSE_REPOSITORY, busybox_rootfs_tar(busybox).read_bytes(),
        {"Entrypoint": ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"],
         "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"], "WorkingDir": "/"},
        "gcu-stack realnode sandbox image (static busybox)")


def one_layer_image_archive(repository: str, layer: bytes, container_config: Mapping[str, Any],
                            created_by: str) -> tuple[Path, str]:
    """(a docker-save archive, its reference) of a one-layer image, cached under its config's digest.

    Written here rather than by a dockerd: a node imports it with ctr, no registry or daemon involved.
    """
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {"architecture": "amd64", "os": "linux", "config": dict(container_config),
              "rootfs": {"type": "layers", "diff_ids": [diff_id]}, "history": [{"created_by": created_by}]}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_id = hashlib.sha256(config_bytes).hexdigest()
    ref = f"{repository}:{config_id[:12]}"
    out = CACHE_DIR / repository.rsplit("/", 1)[-1] / f"image-{config_id[:12]}.tar"
    if out.exists():
        return out, ref
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest = [{"Config": f"{config_id}.json", "RepoTags": [ref], "Layers": [f"{config_id}/layer.tar"]}]
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    with tarfile.open(tmp, "w") as tf:
        for name, data in ((f"{config_id}.json", config_bytes), (f"{config_id}/layer.tar", layer),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tf.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    return out, ref


# --------------------------------------------------------------------------- the node

class RealNode(StartStop):
    """A kubelet + containerd node in its own network and mount namespaces (see the module docstring).

    Args:
      workdir: the node's directory (configs, state, logs, the node's /var/lib and /var/log).
        Must not be under /var/lib, /var/log or /run (those are replaced inside the node).
      name: the Node's name; also names the network namespace (gcurn-<name>): unique per machine.
      kubeconfig: a kubeconfig with rights to read/patch/delete Nodes (the cluster admin's).
      ca_cert / ca_key: the cluster CA; when given, the kubelet gets its own client certificate
        (system:node:<name>, group system:nodes), as on a real cluster. Otherwise it uses `kubeconfig`.
      labels / taints: put on the Node at registration.
      snapshotter: containerd snapshotter for the CRI ("overlayfs": images unpack and containers start without
        copying their files, which "native", as in REFERENCE.md, does for every layer and every container).
      detach: processes outlive this Python process (CLI). Otherwise the kubelet and containerd get SIGKILL
        when it dies, and the node's agent then removes everything else.
      delete_node_on_stop: stop() deletes the Node object.
      fake_gcus: stand-in GCU hardware: this many character devices /dev/gcu0.. (c 1:3, like /dev/null)
        in the node's own /dev (``add_fake_gcus``, ``dev_path``), where the stand-in device plugin
        (devtools/fakegcu) finds them through the DaemonSet's /dev mount, as the real one finds the driver's.
    """

    def __init__(self, workdir: Union[str, Path], name: str, kubeconfig: Union[str, Path], *,
                 ca_cert: Optional[Union[str, Path]] = None, ca_key: Optional[Union[str, Path]] = None,
                 labels: Optional[Mapping[str, str]] = None, taints: Sequence[Mapping[str, str]] = (),
                 snapshotter: str = "overlayfs", detach: bool = False, delete_node_on_stop: bool = True,
                 fake_gcus: int = 0, kubelet_verbosity: int = 2,
                 extra_kubelet_config: Optional[Mapping[str, Any]] = None):
        if os.geteuid() != 0:
            raise RealNodeError(f"real node {name}: needs root (network/mount namespaces, mounts, cgroups)")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,50}[a-z0-9])?", name):
            raise RealNodeError(f"real node name {name!r}: use a DNS label of at most 52 characters "
                                f"(lowercase letters, digits, '-', '.')")
        self.workdir = Path(workdir).resolve()
        for hidden in ("/var/lib", "/var/log", "/run", "/var/run"):
            if self.workdir == Path(hidden) or Path(hidden) in self.workdir.parents:
                raise RealNodeError(f"real node {name}: workdir {self.workdir} is under {hidden}, which the node "
                                    f"replaces with a directory of its own; choose another directory")
        self.name = name
        self.kubeconfig = Path(kubeconfig).resolve()
        self.ca_cert = Path(ca_cert).resolve() if ca_cert else None
        self.ca_key = Path(ca_key).resolve() if ca_key else None
        self.labels = {REAL_NODE_LABEL: "true", **(labels or {})}
        self.taints = [dict(t) for t in taints]
        self.snapshotter = snapshotter
        self.detach = detach
        self.delete_node_on_stop = delete_node_on_stop
        self.kubelet_verbosity = kubelet_verbosity
        self.extra_kubelet_config = dict(extra_kubelet_config or {})
        self.fake_gcus = fake_gcus
        self.netns = netns_name(name)
        self.link = link_name(name)
        self.index: Optional[int] = None
        self.timings: dict[str, float] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.pids: dict[str, int] = {}
        self.state: dict = {}
        self._agent_pipe: Optional[int] = None
        self._api: Optional[KubeApi] = None
        self._tc: Optional[dict] = None
        self.sandbox_image = ""

    # ---- constructors
    @classmethod
    def for_cluster(cls, cluster: Any, workdir: Union[str, Path], name: str, **kw: Any) -> "RealNode":
        """A node for a devtools.localcluster.LocalCluster: its admin kubeconfig and its CA (pki/ca.*)."""
        pki = Path(cluster.workdir) / "pki"
        return cls(workdir, name, cluster.kubeconfig, ca_cert=pki / "ca.crt", ca_key=pki / "ca.key", **kw)

    @classmethod
    def from_state_dir(cls, state_dir: Union[str, Path]) -> "RealNode":
        st = json.loads((Path(state_dir) / "state.json").read_text())
        node = cls(st["workdir"], st["name"], st["kubeconfig"], detach=True,
                   delete_node_on_stop=st.get("delete_node_on_stop", True), snapshotter=st.get("snapshotter", "native"))
        node.state = st
        node.index = st.get("index")
        node.pids = {k: int(v) for k, v in (st.get("pids") or {}).items()}
        node.sandbox_image = st.get("sandbox_image", "")
        node.timings = dict(st.get("timings") or {})
        return node

    # ---- paths
    @property
    def toolchain(self) -> dict:
        if self._tc is None:
            self._tc = find_toolchain()
        return self._tc

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self.kubeconfig)
        return self._api

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def containerd_dir(self) -> Path:
        return self.workdir / "containerd"

    @property
    def containerd_config(self) -> Path:
        """containerd's config file (``version = 2``); drop-ins go to ``containerd_conf_d``."""
        return self.containerd_dir / "config.toml"

    @property
    def containerd_conf_d(self) -> Path:
        """Drop-ins containerd imports, seen from this machine (/etc/containerd/conf.d inside the node)."""
        return self.containerd_dir / "conf.d"

    @property
    def node_conf_d(self) -> str:
        """The drop-in directory as containerd (inside the node) names it in ``imports``."""
        return "/etc/containerd/conf.d" if self.state.get("etc_containerd") else str(self.containerd_conf_d)

    @property
    def run_containerd_dir(self) -> Path:
        """The node's /run/containerd, seen from this machine (containerd's socket, pid file, shim sockets).

        ``<workdir>/run-containerd``, or a short directory under /tmp when that path is too long for
        unix sockets."""
        d = self.workdir / "run-containerd"
        if len(str(d / "containerd.sock.ttrpc")) < 100:
            return d
        return Path("/tmp") / f"gcurn-{hashlib.sha1(str(self.workdir).encode()).hexdigest()[:10]}"

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket from this machine (``ctr -a``); inside the node it is the usual
        /run/containerd/containerd.sock (the kubelet's runtime endpoint)."""
        return self.run_containerd_dir / "containerd.sock"

    @property
    def var_lib(self) -> Path:
        """The node's /var/lib, seen from this machine."""
        return self.workdir / "var-lib"

    @property
    def var_log(self) -> Path:
        return self.workdir / "var-log"

    @property
    def usr_local_enflame(self) -> Path:
        """The node's /usr/local/enflame (where the toolkit's pod installs the enflame runtime), seen from here."""
        return self.workdir / "usr-local-enflame"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's root dir (/var/lib/kubelet inside the node), seen from this machine."""
        return self.var_lib / "kubelet"

    @property
    def device_plugin_dir(self) -> Path:
        """/var/lib/kubelet/device-plugins of the node (kubelet.sock, plugins' sockets), seen from this machine."""
        return self.kubelet_root / "device-plugins"

    def dev_path(self, name: str = "") -> Path:
        """The node's /dev (a tmpfs of its own), or a device in it, reachable from this machine while it runs."""
        return self.node_path("/dev") / name if name else self.node_path("/dev")

    def _fake_pci_devices(self) -> Path:
        """A /sys/bus/pci/devices of the node's own: one directory per stand-in GCU, with the attribute files NFD's
        PCI source reads, so that the real NFD finds them as it finds Enflame cards."""
        root = self.workdir / "sys-bus-pci-devices"
        shutil.rmtree(root, ignore_errors=True)
        for i in range(self.fake_gcus):
            device = root / f"0000:{i + 1:02x}:00.0"
            device.mkdir(parents=True)
            for attribute, value in FAKE_GCU_PCI.items():
                (device / attribute).write_text(value + "\n")
        return root

    def add_fake_gcus(self, count: int) -> list[Path]:
        """Create /dev/gcu0../dev/gcu<count-1> in the node (character devices c 1:3: "the hardware")."""
        out = []
        for i in range(count):
            dev = self.dev_path(f"gcu{i}")
            if not os.path.lexists(dev):
                os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                os.chmod(dev, 0o666)
            out.append(dev)
        return out

    @property
    def node_ip(self) -> str:
        return LINK_NET.format(i=self.index, host=2)

    @property
    def host_ip(self) -> str:
        return LINK_NET.format(i=self.index, host=1)

    @property
    def pod_subnet(self) -> str:
        return POD_NET.format(i=self.index) + ".0/24"

    def in_node(self, *argv: Any) -> list[str]:
        """argv run inside the node's network and mount namespaces (via nsenter)."""
        holder = self.pids.get("holder")
        if not holder:
            raise RealNodeError(f"real node {self.name} is not running")
        return [self.toolchain["nsenter"], "-t", str(holder), "-m", "-n", "--", *map(str, argv)]

    # ---- lifecycle
    def start(self, timeout: float = 180.0) -> "RealNode":
        """Namespaces, containerd, the kubelet; returns once the Node is Ready. On failure everything is removed."""
        tc = self.toolchain
        t0 = time.monotonic()
        deadline = t0 + timeout
        owner = running_owner(self.name)
        if owner:
            raise RealNodeError(
                f"real node {self.name} is already running on this machine (its kubelet uses {owner}); stop it with "
                f"`python -m devtools.realnode down --state-dir {owner}` or give this node another name")
        sweep_stale(log=lambda m: print(m, file=sys.stderr))
        stale = find_stale(self.name)
        if stale:
            print(f"realnode {self.name}: removing a stale node of the same name ({', '.join(stale)})", file=sys.stderr)
            old = self.workdir / "state.json"
            st = json.loads(old.read_text()) if old.exists() else {}
            if st.get("name") != self.name:
                st = {"name": self.name, "netns": self.netns, "link": self.link, "workdir": str(self.workdir)}
            teardown(st, log=lambda m: print(m, file=sys.stderr))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        _record_owner(self.name, self.workdir)
        try:
            self._check_server()
            self._setup_network()
            self.timings["network"] = time.monotonic() - t0
            self._start_agent()
            self._setup_mount_namespace()
            self.timings["namespaces"] = time.monotonic() - t0
            self._write_containerd_config()
            self._start_containerd(deadline)
            self.timings["containerd"] = time.monotonic() - t0
            t = time.monotonic()
            archive, self.sandbox_image = sandbox_image_archive(tc["busybox"])
            self.import_image(archive)
            self.timings["sandbox-image-import"] = time.monotonic() - t
            if self.fake_gcus:
                self.add_fake_gcus(self.fake_gcus)
            self._write_kubelet_files()
            self._start_kubelet()
            self._start_kube_proxy()
            self._write_state()
            self._wait_registered(deadline)
            self.timings["registered"] = time.monotonic() - t0
            self._apply_restricted_labels()
            self._wait_ready(deadline)
            self.timings["ready"] = time.monotonic() - t0
            self._write_state()
        except BaseException:
            try:
                self.stop()
            except Exception as cleanup_error:  # pragma: no cover - reported with the original error
                print(f"realnode {self.name}: cleanup after a failed start also failed: {cleanup_error}",
                      file=sys.stderr)
            raise
        return self

    def _check_server(self) -> None:
        host = self.api.host
        if host not in ("127.0.0.1", "localhost"):
            raise RealNodeError(f"real node {self.name}: the API server in {self.kubeconfig} is {self.api.server}; "
                                "only a loopback API server (devtools.localcluster) is forwarded into the node")
        try:
            svc = self.api.get("/api/v1/namespaces/default/services/kubernetes")
            self.service_ip = svc["spec"]["clusterIP"]
            self.service_port = int(svc["spec"]["ports"][0]["port"])
            # Where kube-proxy sends that Service: the address the API server advertises (not reachable as such).
            subset = self.api.get("/api/v1/namespaces/default/endpoints/kubernetes")["subsets"][0]
            self.endpoint_ip, self.endpoint_port = subset["addresses"][0]["ip"], int(subset["ports"][0]["port"])
        except Exception as e:
            raise RealNodeError(f"real node {self.name}: the API server {self.api.server} ({self.kubeconfig}) "
                                f"does not answer: {e}. Start the cluster first.") from e

    # -- network namespace + veth
    def _setup_network(self) -> None:
        ip = self.toolchain["ip"]
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with _machine_lock():
            if not _is_mountpoint("/run/netns"):
                # `ip netns add` makes /run/netns a mount: remembered so that the last node to go undoes it
                _RUN_NETNS_MARKER.write_text("/run/netns was made a mount point by devtools/realnode.py\n")
            used = set()
            out = _run([ip, "-o", "-4", "addr", "show"]).stdout
            for m in re.finditer(r"inet 10\.234\.(\d+)\.", out):
                used.add(int(m.group(1)))
            start = int(hashlib.sha1(self.name.encode()).hexdigest(), 16) % 250 + 1
            for k in range(250):
                i = (start + k - 1) % 250 + 1
                if i not in used:
                    self.index = i
                    break
            else:
                raise RealNodeError("no free 10.234.X.0/30 link network for another real node (250 in use)")
            self.state.update(name=self.name, netns=self.netns, link=self.link, index=self.index,
                              workdir=str(self.workdir))
            self._write_state()
            _run([ip, "netns", "add", self.netns], what=f"real node {self.name}: creating its network namespace")
        ns = ["nsenter", f"--net=/run/netns/{self.netns}", "--"]
        steps = [
            [ip, "link", "add", self.link, "type", "veth", "peer", "name", "eth0", "netns", self.netns],
            [ip, "addr", "add", f"{self.host_ip}/30", "dev", self.link],
            [ip, "link", "set", self.link, "up"],
            [*ns, ip, "link", "set", "lo", "up"],
            [*ns, ip, "addr", "add", f"{self.node_ip}/30", "dev", "eth0"],
            [*ns, ip, "link", "set", "eth0", "up"],
            [*ns, ip, "route", "add", "default", "via", self.host_ip],
            # the kubernetes Service IP and its endpoint (where kube-proxy sends it), both answered by the agent
            [*ns, ip, "addr", "add", f"{self.service_ip}/32", "dev", "lo"],
            [*ns, ip, "addr", "add", f"{self.endpoint_ip}/32", "dev", "lo"],
            [*ns, "/bin/sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],   # this namespace's only
            [ip, "route", "add", self.pod_subnet, "via", self.node_ip, "dev", self.link],
        ]
        for argv in steps:
            _run(argv, what=f"real node {self.name}: network setup")
        self.state["net_ino"] = _ns_inode(f"/run/netns/{self.netns}")
        self._write_state()

    # -- agent: API forwarder into the node (+ reaper when this process dies)
    def _start_agent(self) -> None:
        u = self.api
        listen = [["127.0.0.1", u.port, u.host, u.port], [self.service_ip, self.service_port, u.host, u.port],
                  [self.endpoint_ip, self.endpoint_port, u.host, u.port]]
        self.state["forward"] = listen
        self._write_state()
        argv = [sys.executable, "-m", "devtools.realnode", "agent", "--state-dir", str(self.workdir)]
        env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        ready = self.workdir / "agent.ready"
        ready.unlink(missing_ok=True)
        if self.detach:
            proc = spawn(argv, self.log_dir / "agent.log", detach=True, env=env, cwd=PROJECT_DIR)
        else:
            # The agent outlives this process on purpose: when the pipe's write end closes without a
            # "stop" (this process died), it tears the node down.
            r, w = os.pipe()
            log = open(self.log_dir / "agent.log", "ab", buffering=0)
            try:
                proc = subprocess.Popen(argv + ["--reap-on-eof"], stdin=r, stdout=log, stderr=subprocess.STDOUT,
                                        env=env, cwd=PROJECT_DIR, start_new_session=True, close_fds=True)
            finally:
                log.close()
                os.close(r)
            self._agent_pipe = w
        self.procs["agent"], self.pids["agent"] = proc, proc.pid
        self._write_state()
        deadline = time.monotonic() + 30
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RealNodeError(f"real node {self.name}: its API forwarder did not start\n--- "
                                    f"{self.log_dir / 'agent.log'} ---\n{log_tail(self.log_dir / 'agent.log')}")
            time.sleep(0.05)

    # -- mount namespace
    def _setup_mount_namespace(self) -> None:
        tc = self.toolchain
        overlay_error = overlay_mount_error(self.workdir)
        if overlay_error:
            raise RealNodeError(f"real node {self.name}: overlay mounts do not work in {self.workdir} ({overlay_error}); "
                                "the node's /usr/local is one, and so are its containers' root filesystems: give it a "
                                "workdir on ext4, xfs or tmpfs")
        usr_local, usr_lib = self.workdir / "usr-local", self.workdir / "usr-lib"
        for d in (self.var_lib, self.var_log, self.workdir / "sysctl", self.kubelet_root / "device-plugins",
                  usr_local / "upper", usr_local / "work", usr_lib / "upper", usr_lib / "work", self.usr_local_enflame):
            d.mkdir(parents=True, exist_ok=True)
        self.state["host_paths_before"] = [p for p in HOST_PATHS_KEPT_INSIDE if os.path.lexists(p)]
        missing = [str(r) for r in _cgroup_roots() if not (r / K8S_NAMESPACE).exists()]
        if missing:   # containerd will make <hierarchy>/k8s.io: the last real node removes them again
            with _machine_lock():
                known = set(_CGROUP_MARKER.read_text().split()) if _CGROUP_MARKER.exists() else set()
                _CGROUP_MARKER.write_text("\n".join(sorted(known | set(missing))) + "\n")
        argv = [tc["nsenter"], f"--net=/run/netns/{self.netns}", "--", tc["unshare"], "--mount",
                "--propagation", "slave", "--", tc["busybox"], "sleep", "2147483647"]
        self._spawn("holder", argv)
        holder = self.pids["holder"]
        deadline = time.monotonic() + 10
        while _proc_ns(holder, "mnt") == _proc_ns(os.getpid(), "mnt") or _cmdline(holder).split()[:1] != [tc["busybox"]]:
            if not pid_alive(holder) or time.monotonic() > deadline:
                raise RealNodeError(f"real node {self.name}: the namespace holder did not start\n"
                                    f"{log_tail(self.log_dir / 'holder.log')}")
            time.sleep(0.02)
        self.state["mnt_ino"] = _proc_ns(holder, "mnt")
        ns = [tc["nsenter"], "-t", str(holder), "-m", "--"]
        self.run_containerd_dir.mkdir(parents=True, exist_ok=True)
        # Recorded now: a start that fails after this still removes a short directory under /tmp.
        self.state["short_dir"] = str(self.run_containerd_dir) \
            if not str(self.run_containerd_dir).startswith(str(self.workdir)) else None
        self.containerd_conf_d.mkdir(parents=True, exist_ok=True)
        script = [
            # other nodes' network namespaces must not be held by this mount namespace
            "if grep -q ' /run/netns ' /proc/self/mountinfo; then umount -l /run/netns; fi",
            "mount -t tmpfs -o mode=0755,size=256m gcu-realnode-run /run",
            # containerd where a node has it: /run/containerd/containerd.sock, /etc/containerd/config.toml
            f"mkdir -p /run/containerd && mount --bind '{self.run_containerd_dir}' /run/containerd",
            f"mount --bind '{self.var_lib}' /var/lib",
            f"mount --bind '{self.var_log}' /var/log",
            # A /usr/local/enflame of its own, so nodes side by side (and the machine) do not share the runtime the
            # toolkit installs; the overlay (writes go to the node's directory) makes its mount point where the
            # machine has none without creating it there.
            f"mount -t overlay gcu-realnode-usr-local -o 'lowerdir=/usr/local,upperdir={usr_local}/upper,"
            f"workdir={usr_local}/work' /usr/local",
            f"mkdir -p /usr/local/enflame && mount --bind '{self.usr_local_enflame}' /usr/local/enflame",
            # The kernel modules directory a node has (this machine has none): the driver's pod mounts /lib/modules,
            # which must be a directory; written through an overlay to the node's own.
            f"mount -t overlay gcu-realnode-usr-lib -o 'lowerdir=/usr/lib,upperdir={usr_lib}/upper,"
            f"workdir={usr_lib}/work' /usr/lib",
            "mkdir -p /usr/lib/modules",
        ]
        # A /dev of its own: what a pod does to the node's /dev (a driver creating device nodes, the
        # kubelet's /dev/termination-log over a hostPath /dev) stays in the node; fake GCUs live there.
        script += [
            "mount -t tmpfs -o mode=0755,size=16m,nosuid gcu-realnode-dev /dev",
            *(f"mknod -m {mode} /dev/{name} c {major} {minor}" for name, mode, major, minor in NODE_DEVICES),
            "ln -s /proc/self/fd /dev/fd", "ln -s /proc/self/fd/0 /dev/stdin",
            "ln -s /proc/self/fd/1 /dev/stdout", "ln -s /proc/self/fd/2 /dev/stderr",
            "mkdir /dev/pts /dev/shm /dev/mqueue",
            "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts",
            "ln -s pts/ptmx /dev/ptmx",
            "mount -t tmpfs -o mode=1777,size=64m,nosuid,nodev shm /dev/shm",
            "mount -t mqueue mqueue /dev/mqueue",
        ]
        # /etc/containerd is a mount point only where the machine has one (Debian's containerd package does)
        self.state["etc_containerd"] = os.path.isdir("/etc/containerd")
        if self.state["etc_containerd"]:
            script.append(f"mount --bind '{self.containerd_dir}' /etc/containerd")
        if self.fake_gcus:   # the machine's PCI devices give way to the stand-in GCUs, in this node only
            script.append(f"mount --bind '{self._fake_pci_devices()}' /sys/bus/pci/devices")
        # Shared: the mount namespace containerd gets under this one (_start_containerd) receives what the node mounts.
        script.append("mount --make-rshared /")
        for key, value in KERNEL_TUNABLES.items():
            shadow = self.workdir / "sysctl" / key.replace("/", ".")
            shadow.write_text(value + "\n")
            script.append(f"mount --bind '{shadow}' /proc/sys/{key}")
        _run([*ns, "/bin/sh", "-ec", "\n".join(script)], what=f"real node {self.name}: mount namespace setup")
        self._write_state()

    def _spawn(self, what: str, argv: Sequence[Any], env: Optional[dict] = None) -> None:
        env = {**(os.environ if env is None else env), NODE_MARKER: self.netns}
        proc = spawn(argv, self.log_dir / f"{what}.log", detach=self.detach, env=env)
        self.procs[what], self.pids[what] = proc, proc.pid
        self.state["pids"] = dict(self.pids)
        self._write_state()

    # -- containerd
    def _write_containerd_config(self) -> None:
        d = self.containerd_dir
        for sub in ("root", "state", "opt"):  # (conf.d and the run directory: made with the mount namespace)
            (d / sub).mkdir(parents=True, exist_ok=True)
        cni = self.workdir / "cni" / "net.d"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-gcu-realnode.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "gcu-realnode",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": self.pod_subnet}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/var/lib/cni/networks"}},
                {"type": "loopback"},
            ]}, indent=2) + "\n")
        _, pause_ref = sandbox_image_archive(self.toolchain["busybox"])
        self.containerd_config.write_text(
            f"# containerd of the gcu-stack real node {self.name} (devtools/realnode.py)\n" + containerd_config_text(
                self.containerd_config_version, root=d / "root", state=d / "state", opt=d / "opt",
                imports=f"{self.node_conf_d}/*.toml", pause_ref=pause_ref, snapshotter=self.snapshotter,
                cni_bin_dir=self.toolchain["cni_dir"], cni_conf_dir=cni, registry_hosts=self.registry_hosts))

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry hosts directory (``<registry name>/hosts.toml``), read at each pull."""
        return self.containerd_dir / "certs.d"

    def mirror(self, registry_name: str, port: int) -> None:
        """Images named under `registry_name` are pulled over plain HTTP from port `port` of this machine, which the
        node reaches through its veth (devtools/ociregistry's Registry listens there)."""
        import tomlkit

        endpoint = f"http://{self.host_ip}:{port}"
        hosts = tomlkit.document()
        hosts["server"] = endpoint
        hosts["host"] = {endpoint: {"capabilities": ["pull", "resolve"]}}
        target = self.registry_hosts / registry_name / "hosts.toml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(tomlkit.dumps(hosts))

    @property
    def containerd_config_version(self) -> int:
        """3 for containerd 2 (its own format), 2 for containerd 1.6."""
        return node_containerd()[0]

    # containerd runs under a small supervisor loop, like a service with Restart=always: whatever stops
    # it (a toolkit pod activating a runtime: `kill $(cat /run/containerd/containerd.pid)`), it comes back.
    CONTAINERD_PIDFILE = f"{NODE_RUN_CONTAINERD}/containerd.pid"    # inside the node

    def node_path(self, path: str) -> Path:
        """A path as the node sees it (its /run, /var/lib, ...), reachable from this machine."""
        holder = self.pids.get("holder")
        if not holder:
            raise RealNodeError(f"real node {self.name} is not running")
        return Path(f"/proc/{holder}/root") / path.lstrip("/")

    def containerd_pid(self) -> Optional[int]:
        """containerd's pid on this machine. Its pid file holds the one in the node's PID namespace (where hostPID pods
        see it, and kill it to restart it)."""
        try:
            inner = int((self.run_containerd_dir / Path(self.CONTAINERD_PIDFILE).name).read_text().strip())
        except (OSError, ValueError):
            return None
        return self.machine_pid(inner)

    def machine_pid(self, pid: int) -> Optional[int]:
        """This machine's pid of the process `pid` of the node's PID namespace (a container's pid as containerd and
        hostPID pods see it); None when it runs no longer."""
        return _outer_pid(self.pids.get("containerd"), pid)

    def _start_containerd(self, deadline: float) -> None:
        tc = self.toolchain
        sock = self.containerd_socket
        sock.unlink(missing_ok=True)
        env = {**os.environ, "PATH": f"{Path(tc['containerd-shim-runc-v2']).parent}:{Path(tc['runc']).parent}:"
                                     "/usr/sbin:/usr/bin:/sbin:/bin"}
        loop = ("n=0\n"
                "while :; do\n"
                f"  '{tc['containerd']}' --config '{self.containerd_config}' &\n"
                f"  echo $! > {self.CONTAINERD_PIDFILE}\n"
                "  wait $!; code=$?; n=$((n+1))\n"
                "  echo \"gcu-stack realnode: containerd exited ($code), starting it again (restart $n)\"\n"
                "  sleep 0.5\n"
                "done\n")
        # In a PID namespace of the node's own, with its /proc (in a mount namespace under the node's, which receives
        # every mount the node makes later, the kubelet's volumes included): a hostPID pod sees the node's containerd,
        # shims and containers, not those of every node on the machine (the driver looks for who holds a GCU there).
        # The loop is its init; when it dies (stop(), or `unshare` killed) the kernel kills the rest.
        pid_namespace = [tc["unshare"], "--pid", "--fork", "--kill-child", "--mount", "--propagation", "slave",
                         "--mount-proc", "--"]
        self._spawn("containerd", self.in_node(*pid_namespace, "/bin/sh", "-c", loop), env=env)
        self._wait_containerd(deadline, previous=None)

    def _wait_containerd(self, deadline: float, previous: Optional[int]) -> None:
        sock = self.containerd_socket
        while True:
            proc = self.procs.get("containerd")
            if proc is not None and proc.poll() is not None:
                raise self._fail("containerd", f"supervisor exited during startup (exit code {proc.returncode})")
            pid = self.containerd_pid()
            if pid and pid != previous and sock.exists() and self.ctr("version", check=False, timeout=10).returncode == 0:
                self.pids["containerd-daemon"] = pid
                return
            if time.monotonic() > deadline:
                raise self._fail("containerd", f"did not answer on {sock} in time")
            time.sleep(0.1)

    def restart_containerd(self, timeout: float = 60.0) -> float:
        """Stop the node's containerd and wait until its supervisor has it back (activating a runtime
        takes a restart: containerd 1.6 has no reload). Containers keep running (their shims stay).
        Returns the seconds it took. From a pod (hostPID, /run/containerd mounted), the same is
        ``kill $(cat /run/containerd/containerd.pid)``."""
        t0 = time.monotonic()
        old = self.containerd_pid()
        if old and pid_alive(old):
            os.kill(old, signal.SIGTERM)
        self._wait_containerd(time.monotonic() + timeout, previous=old)
        return time.monotonic() - t0

    def wait_containerd_restarted(self, previous: int, timeout: float = 60.0) -> int:
        """Wait until containerd runs with another pid than `previous` (restarted from elsewhere) and answers."""
        self._wait_containerd(time.monotonic() + timeout, previous=previous)
        return self.pids["containerd-daemon"]

    def restart_kubelet(self, timeout: float = 120.0) -> float:
        """Stop and start the kubelet (pods keep running); returns once the Node is Ready again.

        The kubelet removes every socket in its device-plugin directory when it starts, so device
        plugins must notice and register again. Returns the seconds it took."""
        t0 = time.monotonic()
        pid = self.pids.get("kubelet")
        if pid:
            kill_pid(pid, proc=self.procs.get("kubelet"), timeout=20)
        self._start_kubelet()
        self._write_state()
        deadline = time.monotonic() + timeout
        time.sleep(1.0)   # the Node is still Ready from before: give the new kubelet a status update first
        self._wait_ready(deadline)
        return time.monotonic() - t0

    def ctr(self, *args: Any, check: bool = True, input: Optional[Union[str, bytes]] = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """ctr against the node's containerd, in the CRI's k8s.io namespace."""
        return _run([self.toolchain["ctr"], "-a", self.containerd_socket, "-n", K8S_NAMESPACE, *args], check=check,
                    input=input, timeout=timeout, what=f"real node {self.name}: ctr")

    def import_image(self, source: Any, ref: Optional[str] = None, *, timeout: float = 900) -> float:
        """Import one image (``import_images`` with ``ref``, or every image of an archive); returns the seconds it took."""
        return self.import_images(source, [ref] if ref else [], timeout=timeout)

    def import_images(self, source: Any, refs: Sequence[str] = (), *, timeout: float = 900) -> float:
        """Import images into the node's containerd (CRI namespace, unpacked for its snapshotter).

        source: a ``docker save`` archive (path), or a devtools.dockerd.Dockerd or a docker host
        ("unix:///.../docker.sock"): then ``refs`` are saved from that dockerd in one archive and streamed in (the
        layers they share, e.g. one base image, travel once). Returns the seconds it took. Pods use them with
        imagePullPolicy Never (or IfNotPresent) under the same references.
        """
        t0 = time.monotonic()
        refs = list(refs)
        importer = [self.toolchain["ctr"], "-a", str(self.containerd_socket), "-n", K8S_NAMESPACE, "images",
                    "import", "--snapshotter", self.snapshotter]
        if self.containerd_config_version == 3:   # ctr 2 imports through the transfer service, whose unpacker
            importer.append("--local")             # knows only the default snapshotter: unpack here, as ctr 1.6 did
        docker_host = source if isinstance(source, str) and source.startswith(("unix://", "tcp://")) else \
            getattr(source, "host", None) if hasattr(source, "bins") else None
        what = ", ".join(refs) or str(source)
        if docker_host:
            if not refs:
                raise ValueError("import_images(dockerd, refs): name the images to save from the dockerd")
            docker = source.bins["docker"] if hasattr(source, "bins") else (_exe(["/usr/bin/docker", "docker"]) or "docker")
            save = subprocess.Popen([docker, "-H", docker_host, "save", *refs], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            imp = subprocess.run([*importer, "-"], stdin=save.stdout, capture_output=True, text=True, timeout=timeout)
            save.stdout.close()  # type: ignore[union-attr]
            save_err = save.stderr.read().decode(errors="replace")  # type: ignore[union-attr]
            if save.wait() != 0:
                raise RealNodeError(f"real node {self.name}: docker save {what} failed: {save_err.strip()}")
        else:
            path = Path(source)
            if not path.is_file():
                raise RealNodeError(f"real node {self.name}: no image archive at {path}")
            imp = subprocess.run([*importer, str(path)], capture_output=True, text=True, timeout=timeout)
        if imp.returncode != 0:
            raise RealNodeError(f"real node {self.name}: importing {what} into {self.containerd_socket} "
                                f"failed:\n{imp.stderr.strip()}")
        if refs:
            names = self.images()
            missing = [ref for ref in refs
                       if not any(n == ref or n.endswith("/" + ref) or n == f"docker.io/library/{ref}" for n in names)]
            if missing:
                raise RealNodeError(f"real node {self.name}: imported, but {', '.join(missing)} not among the "
                                    f"node's images: {names}")
        return time.monotonic() - t0

    def images(self) -> list[str]:
        return self.ctr("images", "ls", "-q").stdout.split()

    # -- kubelet
    def _write_kubelet_files(self) -> None:
        kd = self.workdir / "kubelet"
        kd.mkdir(parents=True, exist_ok=True)
        u = self.api
        cluster = {"server": f"https://127.0.0.1:{u.port}",
                   "certificate-authority-data": base64.b64encode(u.ca_pem()).decode()}
        if u.cluster.get("insecure-skip-tls-verify"):
            cluster = {"server": cluster["server"], "insecure-skip-tls-verify": True}
        if self.ca_cert and self.ca_key:
            user = self._node_credentials(kd)
        else:
            user = {k: v for k, v in u.user.items()}
            for key in ("client-certificate", "client-key", "token-file"):
                if user.get(key):
                    user[key] = u._rel(user[key])
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config", "current-context": "node",
            "clusters": [{"name": "cluster", "cluster": cluster}],
            "users": [{"name": "node", "user": user}],
            "contexts": [{"name": "node", "context": {"cluster": "cluster", "user": "node"}}],
        }
        (kd / "kubeconfig").write_text(json.dumps(kubeconfig, indent=2))
        os.chmod(kd / "kubeconfig", 0o600)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False, "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [], "localStorageCapacityIsolation": False,
            "authentication": {"webhook": {"enabled": False}, "anonymous": {"enabled": True}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{NODE_CONTAINERD_SOCKET}",
            "port": KUBELET_PORT, "readOnlyPort": 0, "healthzPort": 0, "resolvConf": "",
            "address": self.node_ip,
            "clusterDomain": CLUSTER_DOMAIN, "clusterDNS": [CLUSTER_DNS_IP],   # devtools/clusterdns.py answers there
            "registerWithTaints": self.taints,
            # imported images are all there is (nothing can be pulled): never collect them
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi"}, "evictionPressureTransitionPeriod": "10s",
            "serializeImagePulls": False,
            "volumePluginDir": "/var/lib/kubelet/volume-plugins",
            "podLogsDir": "/var/log/pods",
            "rotateCertificates": False, "serverTLSBootstrap": False,
            "syncFrequency": "10s", "nodeStatusUpdateFrequency": "5s",
            "shutdownGracePeriod": "0s",
        }
        config.update(self.extra_kubelet_config)
        (kd / "config.json").write_text(json.dumps(config, indent=2))

    def _node_credentials(self, kd: Path) -> dict:
        """A client certificate for system:node:<name> (group system:nodes) signed by the cluster CA."""
        return self._client_credentials(kd, f"system:node:{self.name}", "system:nodes")

    def _client_credentials(self, kd: Path, user: str, group: Optional[str]) -> dict:
        """A client certificate for `user` (in `group`) signed by the cluster CA, under kd/client."""
        openssl = self.toolchain["openssl"]
        pki = kd / "client"
        pki.mkdir(exist_ok=True)
        key, csr, crt, ext = pki / "node.key", pki / "node.csr", pki / "node.crt", pki / "node.ext"
        for f in (self.ca_cert, self.ca_key):
            if not f.is_file():  # type: ignore[union-attr]
                raise RealNodeError(f"real node {self.name}: no CA file at {f} (pass the cluster's ca_cert/ca_key, "
                                    "or neither to use the kubeconfig's own credentials)")
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                       "extendedKeyUsage=clientAuth\n")
        _run([openssl, "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", key, "-out", csr,
              "-subj", (f"/O={group}" if group else "") + f"/CN={user}"], what=f"{user} client key")
        _run([openssl, "x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key, "-CAcreateserial",
              "-CAserial", pki / "ca.srl", "-days", "30", "-sha256", "-extfile", ext, "-out", crt],
             what=f"{user} client certificate")
        os.chmod(key, 0o600)
        return {"client-certificate": str(crt), "client-key": str(key)}

    def _start_kubelet(self) -> None:
        kd = self.workdir / "kubelet"
        node_labels = ",".join(f"{k}={v}" for k, v in self.labels.items() if _kubelet_may_set(k))
        argv = [self.toolchain["kubelet"], "--config", kd / "config.json", "--kubeconfig", kd / "kubeconfig",
                "--root-dir", "/var/lib/kubelet", "--cert-dir", "/var/lib/kubelet/pki",
                "--hostname-override", self.name, "--node-ip", self.node_ip, f"--v={self.kubelet_verbosity}"]
        if node_labels:
            argv += ["--node-labels", node_labels]
        self._spawn("kubelet", self.in_node(*argv))

    def _start_kube_proxy(self) -> None:
        """kube-proxy (iptables mode) in the node's network namespace: Services and NodePorts work there as on a real
        node, its rules live and die with the namespace. It sets nothing machine-wide: conntrack limits and timeouts are
        left alone (0). Node ports are answered on the node's address and, as kube-proxy's default has it, on its
        127.0.0.1 (the GCU-share extender's URL: a scheduler on the node's host network reaches it there); the
        route_localnet that needs is the node's network namespace's own setting."""
        kd = self.workdir / "kube-proxy"
        kd.mkdir(parents=True, exist_ok=True)
        node_config = json.loads((self.workdir / "kubelet" / "kubeconfig").read_text())
        if self.ca_cert and self.ca_key:   # the user the default RBAC binds to system:node-proxier
            node_config["users"][0]["user"] = self._client_credentials(kd, "system:kube-proxy", None)
        (kd / "kubeconfig").write_text(json.dumps(node_config, indent=2))
        os.chmod(kd / "kubeconfig", 0o600)
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kd / "kubeconfig")},
            "hostnameOverride": self.name, "bindAddress": self.node_ip, "mode": "iptables",
            "clusterCIDR": POD_CIDR_ALL,
            "healthzBindAddress": f"{self.node_ip}:{KUBE_PROXY_HEALTHZ_PORT}", "metricsBindAddress": "127.0.0.1:10249",
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "nodePortAddresses": [f"{self.node_ip}/32", "127.0.0.1/32"],
            "iptables": {"localhostNodePorts": True},
        }
        (kd / "config.json").write_text(json.dumps(config, indent=2))
        path = f"{os.path.dirname(self.toolchain['iptables'])}:/usr/sbin:/usr/bin:/sbin:/bin"
        self._spawn("kube-proxy", self.in_node(self.toolchain["kube-proxy"], "--config", kd / "config.json", "--v=2"),
                    env={**os.environ, "PATH": path})

    def _fail(self, what: str, why: str) -> RealNodeError:
        log = self.log_dir / f"{what}.log"
        return RealNodeError(f"real node {self.name}: {what} {why}\n--- last lines of {log} ---\n{log_tail(log, 40)}")

    def _node(self) -> Optional[dict]:
        try:
            return self.api.get(f"/api/v1/nodes/{self.name}")
        except RealNodeError as e:
            if getattr(e, "status", None) == 404:
                return None
            raise

    def _wait_registered(self, deadline: float) -> None:
        while True:
            for what in ("kubelet", "containerd"):
                proc = self.procs.get(what)
                if proc is not None and proc.poll() is not None:
                    raise self._fail(what, f"exited (exit code {proc.returncode})")
            try:
                if self._node() is not None:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise self._fail("kubelet", "did not register the Node in time")
            time.sleep(0.2)

    def _apply_restricted_labels(self) -> None:
        extra = {k: v for k, v in self.labels.items() if not _kubelet_may_set(k)}
        if extra:
            self.api.request("PATCH", f"/api/v1/nodes/{self.name}", {"metadata": {"labels": extra}},
                             content_type="application/merge-patch+json")

    def _wait_ready(self, deadline: float) -> None:
        last = None
        while True:
            proc = self.procs.get("kubelet")
            if proc is not None and proc.poll() is not None:
                raise self._fail("kubelet", f"exited (exit code {proc.returncode})")
            try:
                last = self._node()
                if last is not None and node_ready(last):
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                conds = ((last or {}).get("status") or {}).get("conditions")
                raise self._fail("kubelet", f"registered but the Node is not Ready in time (conditions: {conds})")
            time.sleep(0.2)

    def wait_ready(self, timeout: float = 60.0) -> None:
        self._wait_ready(time.monotonic() + timeout)

    def allocatable(self) -> dict:
        return ((self._node() or {}).get("status") or {}).get("allocatable") or {}

    def pod_log(self, namespace: str, pod: str, container: Optional[str] = None) -> str:
        """A pod container's log, read from the node's /var/log/pods (CRI format stripped to the message)."""
        base = self.var_log / "pods"
        dirs = sorted(base.glob(f"{namespace}_{pod}_*"))
        if not dirs:
            raise RealNodeError(f"real node {self.name}: no logs for pod {namespace}/{pod} under {base}")
        cdirs = [d for d in sorted(dirs[-1].iterdir()) if d.is_dir() and (container is None or d.name == container)]
        if not cdirs:
            raise RealNodeError(f"real node {self.name}: pod {namespace}/{pod} has no log of container {container}")
        files = sorted(cdirs[0].glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
        lines = []
        for line in (files[-1].read_text(errors="replace").splitlines() if files else []):
            parts = line.split(" ", 3)
            lines.append(parts[3] if len(parts) == 4 else line)
        return "\n".join(lines) + ("\n" if lines else "")

    # ---- stop
    def stop(self, *, delete_node: Optional[bool] = None) -> list[str]:
        """Remove everything the node made (see the module docstring); returns what could not be removed."""
        if delete_node is None:
            delete_node = self.delete_node_on_stop
        st = dict(self.state) or {"name": self.name, "netns": self.netns, "link": self.link}
        st.setdefault("workdir", str(self.workdir))
        st["pids"] = dict(self.pids)
        st["kubeconfig"] = str(self.kubeconfig)
        # the node first; if this process dies meanwhile, the agent (still waiting) finishes the job
        problems = teardown(st, delete_node=delete_node,
                            procs={k: v for k, v in self.procs.items() if k != "agent"},
                            log=lambda m: print(m, file=sys.stderr))
        # then the agent: told to stop, it exits without tearing down again
        agent = self.procs.get("agent")
        if self._agent_pipe is not None:
            try:
                os.write(self._agent_pipe, b"stop\n")
            except OSError:
                pass
            os.close(self._agent_pipe)
            self._agent_pipe = None
        if agent is not None:
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait(5)
        elif self.pids.get("agent") and "devtools.realnode agent" in _cmdline(self.pids["agent"]):
            kill_pid(self.pids["agent"], timeout=5)
        self.procs.clear()
        self.pids.clear()
        last = self.workdir / "state.json"
        if last.exists():   # kept for `leftovers` after `down`
            last.replace(self.workdir / "stopped.json")
        if self._api is not None:
            self._api.close()
            self._api = None
        return problems

    def leftovers(self) -> dict:
        st = dict(self.state) or {"name": self.name, "netns": self.netns, "link": self.link}
        st.setdefault("workdir", str(self.workdir))
        return leftovers(st)

    # ---- state
    def _write_state(self) -> None:
        self.state.update(
            name=self.name, workdir=str(self.workdir), kubeconfig=str(self.kubeconfig), netns=self.netns,
            link=self.link, index=self.index, pids=dict(self.pids), socket=str(self.containerd_socket),
            snapshotter=self.snapshotter, delete_node_on_stop=self.delete_node_on_stop, timings=self.timings,
            sandbox_image=self.sandbox_image, detach=self.detach,
        )
        write_json(self.workdir / "state.json", self.state)

    def summary(self) -> dict:
        return {"name": self.name, "node_ip": self.node_ip if self.index else None, "netns": self.netns,
                "containerd_address": str(self.containerd_socket), "containerd_config": str(self.containerd_config),
                "containerd_conf_d": str(self.containerd_conf_d), "kubelet_root": str(self.kubelet_root),
                "device_plugin_dir": str(self.device_plugin_dir), "pod_subnet": self.pod_subnet if self.index else None,
                "logs": str(self.log_dir), "sandbox_image": self.sandbox_image, "timings": self.timings}


# --------------------------------------------------------------------------- teardown / leftovers

def _task_ids(st: Mapping) -> set[str]:
    """Container and sandbox ids of this node's containerd (from its state and root dirs)."""
    ids: set[str] = set()
    wd = Path(st.get("workdir", "/nonexistent"))
    for d in (wd / "containerd" / "state" / "io.containerd.runtime.v2.task" / K8S_NAMESPACE,
              wd / "containerd" / "root" / "io.containerd.grpc.v1.cri" / "containers",
              wd / "containerd" / "root" / "io.containerd.grpc.v1.cri" / "sandboxes"):
        try:
            ids.update(p.name for p in d.iterdir() if re.fullmatch(r"[0-9a-f]{64}", p.name))
        except OSError:
            pass
    return ids


def _container_cgroups(ids: set[str]) -> list[Path]:
    out = []
    for root in _cgroup_roots():
        for parent in ("k8s.io", ""):
            for i in ids:
                p = root / parent / i if parent else root / i
                if p.is_dir():
                    out.append(p)
    return out


def _node_pids(st: Mapping) -> set[int]:
    """Every process of the node: the node's programs in its network or mount namespace (containerd,
    its supervisor and shims, the kubelet, the holder) and their descendants, and whatever is in the
    cgroup of one of its containers."""
    pinned_net = _ns_inode(f"/run/netns/{st['netns']}")   # held by its /run/netns file: this inode is the node's
    net_ino = pinned_net or st.get("net_ino")
    mnt_ino = st.get("mnt_ino")
    me = _ancestors(os.getpid())
    agent = (st.get("pids") or {}).get("agent")
    roots: set[int] = set()
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        ppid = _ppid(pid)
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
        if pid in me or pid == agent:
            continue
        cmd = _cmdline(pid)
        if (net_ino and _proc_ns(pid, "net") == net_ino) or (mnt_ino and _proc_ns(pid, "mnt") == mnt_ino):
            # A namespace inode is reused as soon as the namespace is gone (while teardown kills the node, a docker
            # build's `sh` got its mount namespace's): only the node's own programs count (containers are found as
            # their descendants or by cgroup), and by a recorded inode only those that carry the node's marker.
            if os.path.basename(cmd.split(" ", 1)[0]) in NODE_PROGRAMS and (
                    (pinned_net and _proc_ns(pid, "net") == pinned_net) or _environ_has(pid, f"{NODE_MARKER}={st['netns']}")):
                roots.add(pid)
    out = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out or pid in me:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    for cg in _container_cgroups(_task_ids(st)):
        try:
            out.update(int(x) for x in (cg / "cgroup.procs").read_text().split())
        except OSError:
            pass
    return out - me


def _rmdir(path: Path) -> bool:
    """rmdir; True when the directory is gone."""
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _rmdir_cgroup_tree(cgroup: Path) -> bool:
    """rmdir a cgroup's empty descendants, deepest first, then the cgroup; True when it is gone. A cgroup with
    processes is never removed (rmdir refuses it). A container's cgroup can outlive it: runc on cgroup v1 has left a
    cpuset one behind after containerd 2 deleted the container, under the k8s.io parent the last node removes."""
    if cgroup.is_dir():
        for sub in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            _rmdir(sub)
    return _rmdir(cgroup)


def teardown(st: Mapping, *, delete_node: bool = False, procs: Optional[Mapping[str, subprocess.Popen]] = None,
             log=print) -> list[str]:
    """Remove every trace of the node described by `st` (a state dict; name/netns/link suffice for a
    stale node). Idempotent. Returns what could not be removed."""
    problems: list[str] = []
    name, netns, link = st["name"], st["netns"], st.get("link") or link_name(st["name"])
    pids = dict(st.get("pids") or {})
    ip = _exe(["/usr/sbin/ip", "/sbin/ip", "ip"]) or "ip"
    # 1. the kubelet first (it would restart containers), politely
    kpid = pids.get("kubelet")
    if kpid and pid_alive(kpid) and "kubelet" in _cmdline(kpid):
        kill_pid(kpid, proc=(procs or {}).get("kubelet"), timeout=10)
    # 2. every process of the node, until none is left
    deadline = time.monotonic() + 30
    killed_ids: set[str] = set()   # of killed containers' cgroups (the state dir may be unknown or gone)
    while True:
        victims = _node_pids(st)
        if not victims:
            break
        for pid in victims:
            try:
                for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                    path = line.split(":", 2)[2]
                    if re.fullmatch(r"/(k8s\.io/)?[0-9a-f]{64}", path):
                        killed_ids.add(path.rpartition("/")[2])
            except (OSError, IndexError):
                pass
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for proc in (procs or {}).values():
            try:
                proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        if time.monotonic() > deadline:
            problems.append(f"processes still alive: {sorted(victims)}")
            break
        time.sleep(0.1)
    for proc in (procs or {}).values():
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            problems.append(f"process {proc.pid} did not exit")
    # 3. cgroups of the node's containers (runc removes them when a container is deleted, not when killed)
    found = set(_container_cgroups(_task_ids(st) | killed_ids))
    for cg in sorted(found, key=lambda p: -len(p.parts)):
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY:
                    problems.append(f"cgroup {cg}: {e}")
                    break
                time.sleep(0.1)
        else:
            problems.append(f"cgroup {cg} stays busy")
    if _CGROUP_MARKER.exists():   # the k8s.io parents real nodes made, by the last real node to go
        with _machine_lock():
            others = [n for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else [])
                      if n.startswith(NETNS_PREFIX) and n != netns]
            roots = _CGROUP_MARKER.read_text().split()
            # while another node exists it may have containers there, or be about to: it removes them
            left = roots if others else [r for r in roots if not _rmdir_cgroup_tree(Path(r) / K8S_NAMESPACE)]
            if left:
                _CGROUP_MARKER.write_text("\n".join(left) + "\n")
            else:
                _CGROUP_MARKER.unlink()
    # 4. mounts on this machine under the node's directories (none expected: they live in the node)
    wd = st.get("workdir")
    roots = [p for p in (wd, st.get("short_dir")) if p]
    for mp in mounts_under(roots):
        r = subprocess.run(["umount", "-l", mp], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"umount {mp}: {r.stderr.strip()}")
    # 5. network: namespace, veth (gone with its peer), route; /run/netns if this node made it
    if os.path.exists(f"/run/netns/{netns}"):
        r = subprocess.run([ip, "netns", "delete", netns], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"ip netns delete {netns}: {r.stderr.strip()}")
    for _ in range(50):
        if subprocess.run([ip, "link", "show", link], capture_output=True).returncode != 0:
            break
        subprocess.run([ip, "link", "delete", link], capture_output=True)
        time.sleep(0.1)
    else:
        problems.append(f"interface {link} is still there")
    if _RUN_NETNS_MARKER.exists():   # the last real node undoes what the first one's `ip netns add` did
        with _machine_lock():
            try:
                if not _is_mountpoint("/run/netns"):
                    _RUN_NETNS_MARKER.unlink()
                elif not os.listdir("/run/netns"):
                    subprocess.run(["umount", "/run/netns"], capture_output=True)
                    os.rmdir("/run/netns")
                    _RUN_NETNS_MARKER.unlink()
            except OSError:
                pass
    # 6. the short socket directory, the Node object
    short = st.get("short_dir")
    if short and os.path.basename(short).startswith("gcurn-"):
        shutil.rmtree(short, ignore_errors=True)
    if delete_node and st.get("kubeconfig"):
        try:
            api = KubeApi(st["kubeconfig"])
            try:
                api.request("DELETE", f"/api/v1/nodes/{name}")
            finally:
                api.close()
        except Exception as e:
            if getattr(e, "status", None) != 404:
                log(f"realnode {name}: could not delete the Node object: {e}")
    if problems:
        log(f"realnode {name}: teardown left: " + "; ".join(problems))
    else:
        (_OWNERS / f"{name}.json").unlink(missing_ok=True)
    return problems


def find_stale(name: str) -> list[str]:
    """What exists of a node `name` that no running RealNode owns (by its network namespace/veth)."""
    found = []
    if os.path.exists(f"/run/netns/{netns_name(name)}"):
        found.append(f"network namespace {netns_name(name)}")
    if os.path.exists(f"/sys/class/net/{link_name(name)}"):
        found.append(f"interface {link_name(name)}")
    return found


def _agents_netns() -> set[str]:
    """Network namespaces served by a live agent (read from the state file its command line names)."""
    out = set()
    for pid in _all_pids():
        cmd = _cmdline(pid).split()
        if "devtools.realnode" in cmd and "agent" in cmd and "--state-dir" in cmd:
            state = Path(cmd[cmd.index("--state-dir") + 1]) / "state.json"
            try:
                out.add(json.loads(state.read_text())["netns"])
            except (OSError, ValueError, KeyError):
                pass
    return out


def sweep_stale(min_age: float = 60.0, log=print, only: Optional[Iterable[str]] = None) -> list[str]:
    """Remove every real node of this machine that nobody runs any more: one whose starter is dead (its owner
    record) and that has no kubelet in its network namespace and no agent (its run was killed, or the node half
    started). A node without an owner record (made by older code) counts only when its gcurn-* network namespace
    is older than `min_age` seconds. `only`: just these node names. Returns the names of the nodes removed."""
    only = None if only is None else set(only)  # read once: it may be a generator
    with sweep_lock():
        return _sweep_stale_locked(min_age, log, only)


def _sweep_stale_locked(min_age: float, log, only: Optional[set]) -> list[str]:
    removed = []
    try:
        names = {n[len(NETNS_PREFIX):] for n in os.listdir("/run/netns") if n.startswith(NETNS_PREFIX)}
    except OSError:
        names = set()
    names |= {p.stem for p in _OWNERS.glob("*.json")}
    served = _agents_netns()
    for name in sorted(names):
        if only is not None and name not in only:
            continue
        ns = netns_name(name)
        record = _owner_record(name)
        if (record and owner_alive(record)) or ns in served or running_owner(name):
            continue
        if record is None:
            try:
                age = time.time() - os.stat(f"/run/netns/{ns}").st_mtime
            except OSError:
                continue
            if age < min_age:
                continue
        log(f"realnode: removing the abandoned node {name} (network namespace {ns}; its starter, kubelet and "
            "agent are gone)")
        teardown(_stale_state(name, record), log=log)
        removed.append(name)
    return removed


def _stale_state(name: str, record: Optional[Mapping]) -> dict:
    """What teardown needs of a dead node: its names, and from its workdir's state (when the owner record names one)
    the directories it used. Not its pids or mount namespace: those numbers may belong to others by now."""
    st = {"name": name, "netns": netns_name(name), "link": link_name(name)}
    workdir = (record or {}).get("workdir")
    if workdir:
        st["workdir"] = workdir
        for file in ("state.json", "stopped.json"):
            try:
                saved = json.loads((Path(workdir) / file).read_text())
            except (OSError, ValueError):
                continue
            if saved.get("name") == name:
                st["short_dir"] = saved.get("short_dir")
                break
    return st


def running_owner(name: str) -> Optional[str]:
    """The workdir of a live kubelet of node `name` (in its network namespace), if there is one."""
    net_ino = _ns_inode(f"/run/netns/{netns_name(name)}")
    if not net_ino:
        return None
    for pid in _all_pids():
        cmd = _cmdline(pid).split()
        if cmd and os.path.basename(cmd[0]) == "kubelet" and _proc_ns(pid, "net") == net_ino:
            config = cmd[cmd.index("--config") + 1] if "--config" in cmd else ""
            return str(Path(config).parent.parent) if config else f"pid {pid}"
    return None


def leftovers(st: Mapping) -> dict:
    """Anything of the node still on this machine: processes, mounts, network namespace, interfaces,
    cgroups, host paths it must not have created. Empty lists everywhere when it is clean."""
    wd = st.get("workdir") or ""
    sock = st.get("socket") or ""
    me = _ancestors(os.getpid())
    agent = (st.get("pids") or {}).get("agent")
    procs = set(_node_pids(st))
    for pid in _all_pids():
        cmd = _cmdline(pid)
        if pid not in me and ((sock and sock in cmd) or (wd and f"{wd}/" in cmd and "devtools.realnode" not in cmd)):
            procs.add(pid)
    if agent and pid_alive(agent) and "devtools.realnode" in _cmdline(agent):
        procs.add(agent)
    roots = [r for r in (wd, st.get("short_dir")) if r]
    mounts = mounts_under(roots) + [m for m in mountpoints() if m.startswith(f"/run/netns/{st['netns']}")]
    if _RUN_NETNS_MARKER.exists() and _is_mountpoint("/run/netns"):
        try:
            if not os.listdir("/run/netns"):
                mounts.append("/run/netns (made a mount by a real node, now empty)")
        except OSError:
            pass
    netns = [n for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else []) if n == st["netns"]]
    link = st.get("link") or link_name(st["name"])
    links = [link] if os.path.exists(f"/sys/class/net/{link}") else []
    before = set(st.get("host_paths_before") or HOST_PATHS_KEPT_INSIDE)
    host_paths = [p for p in HOST_PATHS_KEPT_INSIDE if p not in before and os.path.lexists(p)]
    return {"processes": sorted(f"{p} {_cmdline(p)[:160]}" for p in procs if pid_alive(p)),
            "mounts": mounts, "netns": netns, "interfaces": links,
            "cgroups": [str(c) for c in _container_cgroups(_task_ids(st))], "host_paths": host_paths}


# --------------------------------------------------------------------------- agent

def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _serve(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(target, timeout=10)
            upstream.settimeout(None)
        except OSError as e:
            print(f"forward to {target}: {e}", flush=True)
            conn.close()
            continue

        def both(a: socket.socket = conn, b: socket.socket = upstream) -> None:
            t = threading.Thread(target=_pump, args=(b, a), daemon=True)
            t.start()
            _pump(a, b)
            t.join()
            a.close()
            b.close()
        threading.Thread(target=both, daemon=True).start()


def agent_main(state_dir: Path, reap_on_eof: bool) -> int:
    """Forward the API server into the node; with reap_on_eof, tear the node down when stdin closes
    without a "stop" line (the Python process that started the node died)."""
    st = json.loads((state_dir / "state.json").read_text())
    own_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
    listeners = []
    try:
        _setns(f"/run/netns/{st['netns']}")
        for host, port, thost, tport in st["forward"]:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, int(port)))
            s.listen(128)
            listeners.append((s, (thost, int(tport))))
    finally:
        returned = ctypes.CDLL("libc.so.6", use_errno=True).setns(own_ns, _CLONE_NEWNET) == 0
        os.close(own_ns)
    if not returned:
        print("cannot return to the machine's network namespace", flush=True)
        return 1
    for s, target in listeners:
        threading.Thread(target=_serve, args=(s, target), daemon=True).start()
    print(f"forwarding {[f'{h}:{p} -> {th}:{tp}' for h, p, th, tp in st['forward']]} into {st['netns']}", flush=True)
    (state_dir / "agent.ready").write_text(str(os.getpid()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if not reap_on_eof:
        while not stop.is_set():
            stop.wait(3600)
        return 0
    data = b""
    while not stop.is_set():
        r, _, _ = select.select([0], [], [], 1.0)
        if not r:
            continue
        chunk = os.read(0, 1024)
        if not chunk:
            break
        data += chunk
    if b"stop" in data or stop.is_set():
        return 0
    print("the process that started the node is gone: tearing the node down", flush=True)
    try:
        st = json.loads((state_dir / "state.json").read_text())
    except OSError:
        pass
    teardown(st, delete_node=bool(st.get("delete_node_on_stop")), log=lambda m: print(m, flush=True))
    (state_dir / "state.json").unlink(missing_ok=True)
    print("teardown done", flush=True)
    return 0


# --------------------------------------------------------------------------- CLI

def _find_ca(kubeconfig: Path) -> tuple[Optional[Path], Optional[Path]]:
    """devtools.localcluster keeps its CA in <workdir>/pki next to admin.kubeconfig."""
    pki = kubeconfig.resolve().parent / "pki"
    if (pki / "ca.crt").is_file() and (pki / "ca.key").is_file():
        return pki / "ca.crt", pki / "ca.key"
    return None, None


@exit_codes
def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.realnode",
                                 description="A real kubelet + containerd node in its own namespaces (root only).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start detached; prints a JSON summary on stdout")
    up.add_argument("--state-dir", required=True, help="the node's directory (state, configs, logs)")
    up.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the cluster (loopback API server)")
    up.add_argument("--name", required=True, help="Node name (unique on this machine)")
    up.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                    help="node label (repeatable); kubernetes.io ones are set through the API")
    up.add_argument("--taint", action="append", default=[], metavar="KEY[=VALUE]:EFFECT", help="registration taint")
    up.add_argument("--ca-cert", help="cluster CA certificate (default: pki/ca.crt next to the kubeconfig, if any)")
    up.add_argument("--ca-key", help="cluster CA key: the kubelet then gets a system:node:<name> certificate")
    up.add_argument("--fake-gcus", type=int, default=0, metavar="N",
                    help="stand-in GCUs: character devices /dev/gcu0.. in the node's own /dev")
    up.add_argument("--snapshotter", default="overlayfs", help="containerd snapshotter (overlayfs; native copies files)")
    up.add_argument("--timeout", type=float, default=180.0)
    imp = sub.add_parser("import-image", help="import images into the node's containerd")
    imp.add_argument("--state-dir", required=True)
    src = imp.add_mutually_exclusive_group(required=True)
    src.add_argument("--docker-host", help="save the images from this dockerd (unix://...)")
    src.add_argument("--archive", action="append", help="a docker-save archive (repeatable)")
    imp.add_argument("refs", nargs="*")
    sw = sub.add_parser("sweep", help="remove abandoned real nodes of this machine (no kubelet, no agent)")
    sw.add_argument("--min-age", type=float, default=60.0, help="only namespaces older than this (seconds)")
    for name in ("down", "status", "leftovers"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", required=True)
        if name == "down":
            p.add_argument("--keep-node-object", action="store_true", help="do not delete the Node from the API")
    ag = sub.add_parser("agent")   # internal: the node's API forwarder (and reaper)
    ag.add_argument("--state-dir", required=True)
    ag.add_argument("--reap-on-eof", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "sweep":
        removed = sweep_stale(a.min_age, log=lambda m: print(m, file=sys.stderr))
        print(json.dumps(removed))
        return 0
    state_dir = Path(a.state_dir).resolve()
    has_state = (state_dir / "state.json").exists()

    if a.cmd == "agent":
        return agent_main(state_dir, a.reap_on_eof)
    if a.cmd == "up":
        if has_state:
            old = RealNode.from_state_dir(state_dir)
            print(f"realnode {old.name}: stale state in {state_dir}, cleaning up first", file=sys.stderr)
            old.stop()
        kubeconfig = Path(a.kubeconfig).resolve()
        ca_cert, ca_key = (Path(a.ca_cert), Path(a.ca_key)) if a.ca_key else _find_ca(kubeconfig)
        labels = dict(kv.split("=", 1) if "=" in kv else (kv, "") for kv in a.label)
        node = RealNode(state_dir, a.name, kubeconfig, ca_cert=ca_cert, ca_key=ca_key, labels=labels,
                        taints=[parse_taint(t) for t in a.taint], snapshotter=a.snapshotter, detach=True,
                        fake_gcus=a.fake_gcus)
        node.start(timeout=a.timeout)
        print(f"realnode {node.name} Ready in {node.timings.get('ready', 0):.1f}s: node IP {node.node_ip}, "
              f"containerd {node.containerd_socket}, logs {node.log_dir}", file=sys.stderr)
        print(json.dumps(node.summary()))
        return 0
    if a.cmd == "leftovers" and not has_state and (state_dir / "stopped.json").exists():
        left = leftovers(json.loads((state_dir / "stopped.json").read_text()))
        print(json.dumps(left, indent=2))
        return 1 if any(left.values()) else 0
    if not has_state:
        if a.cmd == "status":
            print(json.dumps({"running": False}))
            return 3
        if a.cmd == "leftovers":
            print(json.dumps({}))
            return 0
        print("nothing running", file=sys.stderr)
        return 0
    node = RealNode.from_state_dir(state_dir)
    if a.cmd == "down":
        problems = node.stop(delete_node=not a.keep_node_object)
        return 1 if problems else 0
    if a.cmd == "leftovers":
        left = node.leftovers()
        print(json.dumps(left, indent=2))
        return 1 if any(left.values()) else 0
    if a.cmd == "import-image":
        if a.docker_host:
            secs = node.import_images(a.docker_host, a.refs)
            print(f"imported {', '.join(a.refs)} in {secs:.1f}s", file=sys.stderr)
        else:
            for archive in a.archive:
                secs = node.import_image(archive)
                print(f"imported {archive} in {secs:.1f}s", file=sys.stderr)
        return 0
    ok = all(pid_alive(node.pids.get(k, 0)) for k in ("containerd", "kubelet", "holder"))
    st = node.summary()
    st["running"] = ok
    try:
        n = node._node()
        st["ready"] = bool(n and node_ready(n))
    except Exception as e:
        st["ready"] = False
        st["api_error"] = str(e)
    print(json.dumps(st, indent=2))
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
