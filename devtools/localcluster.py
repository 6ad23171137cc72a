"""A real local Kubernetes control plane with kwok-simulated nodes.

etcd 3.5 + kube-apiserver / kube-controller-manager / kube-scheduler 1.33 (all
built from Go modules) + kwok (simulates the kubelet of every node that carries
the annotation ``kwok.x-k8s.io/node=fake``: marks nodes Ready, heartbeats their
leases, turns bound pods Running/Ready with a pod IP and finalises deletions).
Everything binds to 127.0.0.1 on free ports, so several clusters can run side by
side.

Binaries come from ``scripts/toolchain/kube.sh``. Python stdlib only (the
``probe`` command uses the ``kubernetes`` client when it is installed).

In-process use (pytest fixture)::

    with LocalCluster(tmp_path, nodes=[("gcu-node-1", {GCU_LABEL: "true"}),
                                        ("cpu-node-1", {})]) as c:
        subprocess.run([c.kubectl_bin, "--kubeconfig", c.kubeconfig, "get", "nodes"])

CLI (detached, survives the CLI)::

    python -m devtools.localcluster up --state-dir DIR --nodes 3 --gcu-nodes 2
    python -m devtools.localcluster status --state-dir DIR
    python -m devtools.localcluster down --state-dir DIR
    python -m devtools.localcluster probe    # does the current kube context answer? (exit 0/1)
"""

from __future__ import annotations

import argparse
import atexit
import base64
import collections
import concurrent.futures
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from devtools import (
    CACHE_DIR,
    TOOLCHAIN_HINT,
    ComponentFailed,
    StartStop,
    ToolchainMissing,
    exit_codes,
    free_port,
    kill_pid,
    kubernetes_version,
    log_tail,
    nothing_running,
    pid_matches,
    spawn,
    write_json,
)
from devtools.fakegcu import GCU_RESOURCE  # what the GCU device plugin advertises
from devtools.kubeapi import ApiError, KubeApi  # noqa: F401 (ApiError: what its requests raise, for callers)

K8S_VERSION = kubernetes_version()   # devtools/go/go.mod (GCU_KUBERNETES, GCU_K8S_VERSION)
ETCD_VERSION = os.environ.get("GCU_ETCD_VERSION", "3.5.21")     # devtools/etcd/go.mod
KWOK_VERSION = os.environ.get("GCU_KWOK_VERSION", "v0.8.0")
DEBIAN_ETCD = "/usr/bin/etcd"   # etcd-server 3.4: kube.sh's fallback when etcd 3.5 does not build
DEFAULT_RUNTIME = "docker://20.10.24"   # a simulated node's status.nodeInfo.containerRuntimeVersion

CONTEXT_NAME = "gcu-local"
ADMIN_USER = "admin"                       # user of the admin kubeconfig (group system:masters)
KWOK_USER = "kwok-controller"              # group system:masters
SETUP_USER = "gcu-local-setup"             # LocalCluster's own calls (nodes, readiness); system:masters
CM_USER = "system:kube-controller-manager"  # bound by the bootstrap RBAC policy
SCHED_USER = "system:kube-scheduler"        # bound by the bootstrap RBAC policy

GCU_LABEL = "feature.node.kubernetes.io/pci-1e36.present"   # what NFD puts on Enflame nodes
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.1/16"
# The API server must advertise a non-loopback address (Endpoints reject 127/8).
# Nothing connects to it: clients use the kubeconfig (127.0.0.1).
ADVERTISE_ADDRESS = "10.255.255.254"

DEFAULT_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}

DEFAULT_NODES = (("gcu-node-1", {GCU_LABEL: "true"}), ("cpu-node-1", {}))

# Write verbs only, Metadata level, one event per request (ResponseComplete).
# Events and Leases (kwok/controllers heartbeat noise) are not logged.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: None
  resources:
  - group: ""
    resources: ["events"]
  - group: "events.k8s.io"
    resources: ["events"]
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"""

NodeSpec = Union[str, Sequence[Any], Mapping[str, Any]]


# --------------------------------------------------------------------------- kube-scheduler's /configz

def _v1_field_name(go_name: str) -> str:
    """URLPrefix -> urlPrefix, TLSConfig -> tlsConfig, EnableHTTPS -> enableHTTPS: a Go field's JSON name in v1."""
    leading = re.match(r"[A-Z]+(?=[A-Z][a-z]|$)|[A-Z]", go_name)
    return go_name[:leading.end()].lower() + go_name[leading.end():] if leading else go_name


def _v1_fields(value: Any) -> Any:
    if isinstance(value, dict):   # as v1's omitempty fields: false, zero and empty ones left out
        return {_v1_field_name(key): _v1_fields(item) for key, item in value.items() if item not in (False, None, "", [], 0)}
    if isinstance(value, list):
        return [_v1_fields(item) for item in value]
    return value


def configz_extenders(configz: dict) -> list[dict]:
    """A kube-scheduler /configz's extenders in kubescheduler.config.k8s.io/v1's field names: Kubernetes 1.37 serves
    the v1 document ("extenders"), 1.33 its internal Go structure ("Extenders", "URLPrefix"). v1 omits false and empty
    fields; they are not added back."""
    config = configz["componentconfig"]
    if "Extenders" in config:
        return _v1_fields(config["Extenders"] or [])
    return list(config.get("extenders") or [])


# --------------------------------------------------------------------------- toolchain

@dataclass
class Toolchain:
    etcd: str
    kube_apiserver: str
    kube_controller_manager: str
    kube_scheduler: str
    kubectl: str
    kwok: str
    kwok_config: str

    @classmethod
    def find(cls) -> "Toolchain":
        """Locate every binary; raise ToolchainMissing naming all that are missing.

        Overrides: GCU_KUBE_BIN_DIR (dir with kube-* and kubectl), GCU_KWOK_BIN,
        GCU_KWOK_CONFIG, GCU_ETCD_BIN. etcd is the 3.5 build kube.sh makes; Debian's
        etcd 3.4 is used (with a warning) only when that build is absent.
        """
        missing: list[str] = []
        kube_dir = Path(os.environ.get("GCU_KUBE_BIN_DIR") or CACHE_DIR / f"kubernetes-{K8S_VERSION}" / "bin")
        kwok_dir = CACHE_DIR / f"kwok-{KWOK_VERSION}"
        kwok = Path(os.environ.get("GCU_KWOK_BIN") or kwok_dir / "bin" / "kwok")
        kwok_cfg = Path(os.environ.get("GCU_KWOK_CONFIG") or kwok_dir / "kwok.yaml")
        etcd = os.environ.get("GCU_ETCD_BIN") or str(CACHE_DIR / f"etcd-{ETCD_VERSION}" / "bin" / "etcd")
        if not os.environ.get("GCU_ETCD_BIN") and not os.access(etcd, os.X_OK) and os.access(DEBIAN_ETCD, os.X_OK):
            print(f"WARNING: etcd {ETCD_VERSION} is not built ({etcd}); using Debian's etcd 3.4 at {DEBIAN_ETCD}, "
                  f"which Kubernetes {K8S_VERSION} does not support. Fix: {TOOLCHAIN_HINT}.", file=sys.stderr)
            etcd = DEBIAN_ETCD

        def need(p: Union[str, Path], what: str, executable: bool = True) -> str:
            p = Path(p)
            ok = p.is_file() and (os.access(p, os.X_OK) or not executable)
            if not ok:
                missing.append(f"{what} ({p})")
            return str(p)

        tc = cls(
            etcd=need(etcd, f"etcd {ETCD_VERSION}"),
            kube_apiserver=need(kube_dir / "kube-apiserver", "kube-apiserver"),
            kube_controller_manager=need(kube_dir / "kube-controller-manager", "kube-controller-manager"),
            kube_scheduler=need(kube_dir / "kube-scheduler", "kube-scheduler"),
            kubectl=need(kube_dir / "kubectl", "kubectl"),
            kwok=need(kwok, "kwok"),
            kwok_config=need(kwok_cfg, "kwok stages config", executable=False),
        )
        if missing:
            raise ToolchainMissing("local cluster toolchain incomplete, missing: " + ", ".join(missing)
                                   + f". Fix: {TOOLCHAIN_HINT}.")
        if not shutil.which("openssl"):
            raise ToolchainMissing(f"openssl not found. Fix: {TOOLCHAIN_HINT}.")
        return tc


# --------------------------------------------------------------------------- tiny REST client

# --------------------------------------------------------------------------- helpers

def _run(cmd: Sequence[str], **kw: Any) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stderr}")
    return r


def _gen_certs(d: Path) -> None:
    """CA, API server serving cert (127.0.0.1/localhost/kubernetes.*), SA key pair."""
    d.mkdir(parents=True, exist_ok=True)
    if all((d / f).exists() for f in ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")):
        return
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
          "-keyout", d / "ca.key", "-out", d / "ca.crt", "-subj", "/CN=gcu-local-ca"])
    ext = d / "apiserver.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.96.0.1,"
        f"IP:{ADVERTISE_ADDRESS},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n")
    _run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-keyout", d / "apiserver.key",
          "-out", d / "apiserver.csr", "-subj", "/CN=kube-apiserver"])
    _run(["openssl", "x509", "-req", "-in", d / "apiserver.csr", "-CA", d / "ca.crt", "-CAkey", d / "ca.key",
          "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", ext, "-out", d / "apiserver.crt"])
    _run(["openssl", "genrsa", "-out", d / "sa.key", "2048"])
    _run(["openssl", "rsa", "-in", d / "sa.key", "-pubout", "-out", d / "sa.pub"])
    for f in ("ca.key", "apiserver.key", "sa.key"):
        os.chmod(d / f, 0o600)


def _kubeconfig(server: str, ca_file: Path, user: str, token: str) -> str:
    ca = base64.b64encode(ca_file.read_bytes()).decode()
    return json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": user}}],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }, indent=2)


def _normalize_node(spec: NodeSpec) -> tuple[str, dict, dict]:
    """(name, labels, extra) from "name" | (name, labels) | (name, labels, extra) | dict."""
    if isinstance(spec, str):
        return spec, {}, {}
    if isinstance(spec, Mapping):
        extra = {k: v for k, v in spec.items() if k not in ("name", "labels")}
        return spec["name"], dict(spec.get("labels") or {}), extra
    spec = list(spec)
    name = spec[0]
    labels = dict(spec[1]) if len(spec) > 1 and spec[1] else {}
    extra = dict(spec[2]) if len(spec) > 2 and spec[2] else {}
    return name, labels, extra


def _node_ready(node: dict) -> bool:
    conds = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    taints = (node.get("spec") or {}).get("taints") or []
    return conds.get("Ready") == "True" and not any(
        t.get("key") in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable") for t in taints)


# --------------------------------------------------------------------------- the cluster

@dataclass
class _Component:
    name: str
    exe: str
    argv: list
    log: Path
    proc: Optional[subprocess.Popen] = None
    pid: Optional[int] = None

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and pid_matches(self.pid, self.exe)

    def exit_code(self) -> Optional[int]:
        return self.proc.poll() if self.proc is not None else None


class LocalCluster(StartStop):
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on loopback.

    Args:
      workdir: directory for certs, kubeconfigs, logs, audit log (and the etcd data
        unless etcd_on_tmpfs, which puts it under /dev/shm for speed).
      nodes: simulated nodes created at start; each item is "name",
        (name, labels) or (name, labels, extra) with extra keys ``capacity``
        (merged over DEFAULT_CAPACITY, e.g. {"enflame.com/gcu": "8"}),
        ``taints`` (list of taint dicts), ``annotations``, ``runtime`` (the node's
        ``status.nodeInfo.containerRuntimeVersion``, default ``docker://20.10.24``;
        e.g. ``containerd://1.6.20``).
      audit: write the audit log (write verbs at Metadata level) to ``audit_log``.
      detach: processes outlive this Python process (CLI mode); otherwise they get
        SIGKILL if the thread that called start() dies.
      extra_apiserver_args / extra_controller_manager_args: appended verbatim.
    """

    def __init__(self, workdir: Union[str, Path], nodes: Iterable[NodeSpec] = DEFAULT_NODES, *,
                 audit: bool = True, detach: bool = False, etcd_on_tmpfs: bool = True,
                 extra_apiserver_args: Sequence[str] = (), extra_controller_manager_args: Sequence[str] = (),
                 toolchain: Optional[Toolchain] = None):
        self.workdir = Path(workdir).resolve()
        self.nodes = [_normalize_node(n) for n in nodes]
        self.audit = audit
        self.detach = detach
        self.etcd_on_tmpfs = etcd_on_tmpfs
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.extra_controller_manager_args = list(extra_controller_manager_args)
        self._toolchain = toolchain
        self.components: dict[str, _Component] = {}
        self.ports: dict[str, int] = {}
        self.tokens: dict[str, str] = {}
        self.etcd_data_dir: Optional[Path] = None
        self.scheduler_address = "127.0.0.1"   # restart_scheduler may move it into a node's network namespace
        self.timings: dict[str, float] = {}
        self._api: Optional[KubeApi] = None
        self._started = False
        self._atexit_registered = False

    # ---- paths / properties
    @property
    def toolchain(self) -> Toolchain:
        if self._toolchain is None:
            self._toolchain = Toolchain.find()
        return self._toolchain

    @property
    def kubeconfig(self) -> str:
        """Admin kubeconfig (context ``gcu-local``, user ``admin`` in system:masters)."""
        return str(self.workdir / "admin.kubeconfig")

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def audit_log(self) -> str:
        return str(self.workdir / "logs" / "audit.log")

    @property
    def kubectl_bin(self) -> str:
        return self.toolchain.kubectl

    @property
    def ca_file(self) -> str:
        return str(self.workdir / "pki" / "ca.crt")

    @property
    def admin_token(self) -> str:
        return self.tokens["admin"]

    @property
    def api(self) -> KubeApi:
        """REST client used by LocalCluster itself (user gcu-local-setup, so the admin
        user's audit counts only show what the code under test did)."""
        if self._api is None:
            self._api = KubeApi.with_token(f"https://127.0.0.1:{self.ports['apiserver']}", self.tokens["setup"], self.ca_file)
        return self._api

    def log_path(self, component: str) -> str:
        return str(self.workdir / "logs" / f"{component}.log")

    def env(self) -> dict:
        """os.environ + KUBECONFIG for subprocesses (kubectl, pulumi)."""
        e = dict(os.environ)
        e["KUBECONFIG"] = self.kubeconfig
        return e

    # ---- lifecycle
    def start(self, timeout: float = 60.0) -> "LocalCluster":
        """Start everything and wait_ready(); on failure stop all and raise ComponentFailed."""
        if self._started:
            return self
        tc = self.toolchain
        t0 = time.monotonic()
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        _gen_certs(self.workdir / "pki")
        self.timings["certs"] = time.monotonic() - t0
        self._write_tokens()
        if not self.detach and not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        last_err: Optional[Exception] = None
        for _attempt in range(3):   # retry only on port races ("address already in use")
            try:
                self._start_once(tc, timeout)
                self._started = True
                self.timings["total"] = time.monotonic() - t0
                self._write_state()
                return self
            except ComponentFailed as e:
                self._stop_processes()
                last_err = e
                if "address already in use" not in str(e):
                    raise
        raise last_err  # type: ignore[misc]

    def _write_tokens(self) -> None:
        tok_file = self.workdir / "pki" / "tokens.csv"
        if tok_file.exists():   # reuse (restart in the same workdir keeps kubeconfigs valid)
            for line in tok_file.read_text().splitlines():
                parts = line.split(",")
                if len(parts) >= 3:
                    self.tokens[parts[2]] = parts[0]
        for ident in ("admin", "setup", "kwok", "controller-manager", "scheduler"):
            self.tokens.setdefault(ident, secrets.token_hex(24))
        rows = [
            f'{self.tokens["admin"]},{ADMIN_USER},admin,"system:masters"',
            f'{self.tokens["setup"]},{SETUP_USER},setup,"system:masters"',
            f'{self.tokens["kwok"]},{KWOK_USER},kwok,"system:masters"',
            f'{self.tokens["controller-manager"]},{CM_USER},controller-manager',
            f'{self.tokens["scheduler"]},{SCHED_USER},scheduler',
        ]
        tok_file.write_text("\n".join(rows) + "\n")
        os.chmod(tok_file, 0o600)

    def _write_kubeconfigs(self) -> None:
        ca = Path(self.ca_file)
        for ident, user, fname in (("admin", ADMIN_USER, "admin.kubeconfig"),
                                   ("kwok", KWOK_USER, "kwok.kubeconfig"),
                                   ("controller-manager", CM_USER, "controller-manager.kubeconfig"),
                                   ("scheduler", SCHED_USER, "scheduler.kubeconfig")):
            p = self.workdir / fname
            p.write_text(_kubeconfig(self.server, ca, user, self.tokens[ident]))
            os.chmod(p, 0o600)

    def _start_once(self, tc: Toolchain, timeout: float) -> None:
        t0 = time.monotonic()
        deadline = t0 + timeout
        pki = self.workdir / "pki"
        self.ports = {"etcd": free_port(), "etcd_peer": free_port(), "apiserver": free_port(),
                      "controller_manager": free_port(), "scheduler": free_port()}
        self._api = None
        self._write_kubeconfigs()

        # --- etcd
        if self.etcd_on_tmpfs and os.access("/dev/shm", os.W_OK):
            self.etcd_data_dir = Path(tempfile.mkdtemp(prefix="gcu-etcd-", dir="/dev/shm"))
        else:
            self.etcd_data_dir = self.workdir / "etcd-data"
            if self.etcd_data_dir.exists():
                shutil.rmtree(self.etcd_data_dir)
            self.etcd_data_dir.mkdir(parents=True)
        ec, ep = self.ports["etcd"], self.ports["etcd_peer"]
        self._launch("etcd", tc.etcd, [
            "--name", "gcu-local", "--data-dir", self.etcd_data_dir,
            "--listen-client-urls", f"http://127.0.0.1:{ec}", "--advertise-client-urls", f"http://127.0.0.1:{ec}",
            "--listen-peer-urls", f"http://127.0.0.1:{ep}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{ep}",
            "--initial-cluster", f"gcu-local=http://127.0.0.1:{ep}", "--initial-cluster-state", "new",
            "--logger", "zap", "--log-level", "warn", "--snapshot-count", "10000",
            "--quota-backend-bytes", str(4 << 30),
        ])
        self._wait("etcd", lambda: self._http_ok(f"http://127.0.0.1:{ec}/health", b'"health":"true"'), deadline)
        self.timings["etcd"] = time.monotonic() - t0

        # --- kube-apiserver
        args = [
            "--etcd-servers", f"http://127.0.0.1:{ec}",
            "--bind-address", "127.0.0.1", "--secure-port", self.ports["apiserver"],
            "--advertise-address", ADVERTISE_ADDRESS,
            "--tls-cert-file", pki / "apiserver.crt", "--tls-private-key-file", pki / "apiserver.key",
            "--client-ca-file", pki / "ca.crt",
            "--token-auth-file", pki / "tokens.csv",
            "--service-account-key-file", pki / "sa.pub",
            "--service-account-signing-key-file", pki / "sa.key",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--authorization-mode", "Node,RBAC",
            "--allow-privileged=true",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--enable-admission-plugins", "NodeRestriction",
            "--profiling=false",
            "--event-ttl", "1h",
            "--max-requests-inflight", "800", "--max-mutating-requests-inflight", "400",
            "--cert-dir", pki,
            # Real nodes (devtools/realnode.py) have no resolvable hostname: logs and exec go to their node IP.
            "--kubelet-preferred-address-types", "InternalIP,Hostname",
        ]
        if self.audit:
            policy = self.workdir / "audit-policy.yaml"
            policy.write_text(AUDIT_POLICY)
            args += ["--audit-policy-file", policy, "--audit-log-path", self.audit_log,
                     "--audit-log-mode", "blocking", "--audit-log-format", "json", "--audit-log-maxsize", "0"]
        self._launch("kube-apiserver", tc.kube_apiserver, args + self.extra_apiserver_args)
        self._wait("kube-apiserver", self._apiserver_ready, deadline)
        self.timings["kube-apiserver"] = time.monotonic() - t0

        # --- controllers, scheduler, kwok (in parallel) + nodes
        self._launch("kube-controller-manager", tc.kube_controller_manager, [
            "--kubeconfig", self.workdir / "controller-manager.kubeconfig",
            "--service-account-private-key-file", pki / "sa.key",
            "--root-ca-file", pki / "ca.crt",
            "--use-service-account-credentials=true",
            "--cluster-signing-cert-file", pki / "ca.crt", "--cluster-signing-key-file", pki / "ca.key",
            "--leader-elect=false",
            # /healthz over HTTPS with a self-signed certificate (always allowed without authentication)
            "--secure-port", self.ports["controller_manager"], "--bind-address", "127.0.0.1",
            "--cert-dir", pki / "kube-controller-manager",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--kube-api-qps", "200", "--kube-api-burst", "400",
            "--concurrent-gc-syncs", "40",
            "--profiling=false",
        ] + self.extra_controller_manager_args)
        self._launch("kube-scheduler", tc.kube_scheduler, self._scheduler_flags() + self._scheduler_serving())
        self._launch("kwok", tc.kwok, [
            "--kubeconfig", self.workdir / "kwok.kubeconfig",
            "--config", tc.kwok_config,
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector", f"{KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}",
            "--cidr", POD_CIDR,
            "--node-ip", "10.255.0.1",
            "--node-port", "0",
            "--server-address", "",
            "--node-lease-duration-seconds", "40",
        ], env={**os.environ, "KUBE_FEATURE_WatchListClient": "false"})
        self.add_nodes(self.nodes, wait=False, _record=False)
        self.timings["nodes-created"] = time.monotonic() - t0
        self.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
        self.timings["ready"] = time.monotonic() - t0

    def restart_apiserver(self, down_seconds: float = 5.0, timeout: float = 60.0) -> None:
        """Stop kube-apiserver (SIGTERM, SIGKILL after 10 s, as an upgrade or a crash does), keep it down for
        `down_seconds`, then start it again with the same flags and wait until it is ready."""
        c = self.components["kube-apiserver"]
        if c.proc is not None:
            c.proc.terminate()
            try:
                c.proc.wait(10)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
        elif c.pid is not None and c.alive():
            os.kill(c.pid, signal.SIGKILL)
        time.sleep(down_seconds)
        deadline = time.monotonic() + timeout
        self._launch("kube-apiserver", c.exe, c.argv[1:])
        self._write_state()
        try:
            self._wait("kube-apiserver", self._apiserver_ready, deadline)
        except ComponentFailed:
            # Killed by a signal before serving (seen once as SIGSEGV with no line logged): a second launch says
            # whether the server itself fails; an exit of its own is reported as it is.
            code = self.components["kube-apiserver"].exit_code()
            if code is None or code >= 0:
                raise
            self._launch("kube-apiserver", c.exe, c.argv[1:])
            self._write_state()
            self._wait("kube-apiserver", self._apiserver_ready, deadline)

    def _launch(self, name: str, exe: str, args: Sequence[Any], env: Optional[dict] = None,
                prefix: Sequence[str] = ()) -> None:
        argv = [*prefix, exe] + [str(a) for a in args]   # a prefix that execs (nsenter): the pid stays the program's
        log = Path(self.log_path(name))
        c = _Component(name, exe, argv, log)
        c.proc = spawn(argv, log, detach=self.detach, env=env)
        c.pid = c.proc.pid
        self.components[name] = c

    def _scheduler_flags(self) -> list:
        """How start() runs kube-scheduler (restart_scheduler without a configuration runs it so again)."""
        return ["--kubeconfig", self.workdir / "scheduler.kubeconfig", "--leader-elect=false",
                "--kube-api-qps", "200", "--kube-api-burst", "400"]

    def _scheduler_serving(self) -> list:
        return ["--secure-port", self.ports["scheduler"], "--bind-address", self.scheduler_address,
                "--cert-dir", self.workdir / "pki" / "kube-scheduler", "--profiling=false",
                "--authorization-always-allow-paths", "/healthz,/readyz,/livez,/configz"]

    def restart_scheduler(self, configuration: Optional[Mapping[str, Any]] = None, *, netns: Optional[str] = None,
                          address: str = "127.0.0.1", timeout: float = 60.0) -> Path:
        """Run kube-scheduler again, with `configuration` (a KubeSchedulerConfiguration, as an operator hands it to
        `kube-scheduler --config`; only its clientConnection.kubeconfig is replaced, by this cluster's) and, with
        `netns`, in that network namespace (/run/netns/<netns>) on `address`: where a control-plane node's
        scheduler runs, on the node's host network, so 127.0.0.1 there is the node's (its node ports, say).
        Without a configuration, the flags of start(). Returns the configuration file it runs with."""
        tc = self.toolchain
        old = self.components.pop("kube-scheduler", None)
        if old is not None and old.pid is not None:
            kill_pid(old.pid, exe=None if old.proc is not None else old.exe, proc=old.proc, timeout=10)
        self.scheduler_address = address
        path = self.workdir / "scheduler-config.json"
        if configuration is None:
            path.unlink(missing_ok=True)
            args = self._scheduler_flags()
        else:
            document = dict(configuration)
            document["clientConnection"] = {**(document.get("clientConnection") or {}),
                                            "kubeconfig": str(self.workdir / "scheduler.kubeconfig")}
            path.write_text(json.dumps(document, indent=2))   # JSON is YAML: kube-scheduler reads either
            args = ["--config", path]
        args += self._scheduler_serving()
        enter = [shutil.which("nsenter") or "/usr/bin/nsenter", f"--net=/run/netns/{netns}", "--"] if netns else []
        self._launch("kube-scheduler", tc.kube_scheduler, args, prefix=enter)
        self._wait("kube-scheduler", lambda: self._http_ok(f"https://{address}:{self.ports['scheduler']}/healthz"),
                   time.monotonic() + timeout)
        self._write_state()
        return path

    def scheduler_configz(self) -> dict:
        """The running kube-scheduler's /configz: the configuration as it holds it."""
        status, body = self._http_get(f"https://{self.scheduler_address}:{self.ports['scheduler']}/configz")
        if status != 200:
            raise ComponentFailed(f"kube-scheduler /configz answered HTTP {status}: {body[:300]!r}")
        return json.loads(body)

    def scheduler_extenders(self) -> list[dict]:
        """The extenders the running kube-scheduler holds, in kubescheduler.config.k8s.io/v1's field names."""
        return configz_extenders(self.scheduler_configz())

    def _fail(self, name: str, why: str) -> ComponentFailed:
        c = self.components.get(name)
        code = c.exit_code() if c else None
        tail = log_tail(Path(self.log_path(name)), 40)
        msg = (f"LocalCluster: {name} {why}" + (f" (exit code {code})" if code is not None else "")
               + f"\n--- last lines of {self.log_path(name)} ---\n{tail}")
        return ComponentFailed(msg)

    def _wait(self, name: str, check, deadline: float, interval: float = 0.05) -> None:
        """Poll check() until true; fail loudly if the component dies or time runs out."""
        while True:
            c = self.components.get(name)
            if c is not None and not c.alive():
                raise self._fail(name, "exited during startup")
            try:
                if check():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise self._fail(name, "did not become ready in time")
            time.sleep(interval)

    @staticmethod
    def _http_ok(url: str, needle: bytes = b"ok") -> bool:
        """GET url == 200 with needle in the body; https is not verified (self-signed /healthz certs)."""
        status, body = LocalCluster._http_get(url)
        return status == 200 and needle in body

    @staticmethod
    def _http_get(url: str) -> tuple[int, bytes]:
        u = urllib.parse.urlparse(url)
        if u.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                u.hostname, u.port, timeout=2, context=ssl._create_unverified_context())
        else:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=2)
        try:
            conn.request("GET", u.path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def _apiserver_ready(self) -> bool:
        return self.api.get("/readyz", raw=True, timeout=3).strip() == "ok"

    # ---- readiness
    def wait_ready(self, timeout: float = 60.0) -> None:
        """Every component healthy, the service-account controller working (the default
        ServiceAccount exists; 1.24+ no longer creates token Secrets for it), and every
        kwok node Ready without not-ready taints."""
        deadline = time.monotonic() + timeout
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
            c = self.components.get(name)
            if c is None or not c.alive():
                raise self._fail(name, "is not running")
        self._wait("kube-apiserver", self._apiserver_ready, deadline)
        self._wait("kube-controller-manager",
                   lambda: self._http_ok(f"https://127.0.0.1:{self.ports['controller_manager']}/healthz"), deadline)
        self._wait("kube-scheduler",
                   lambda: self._http_ok(f"https://{self.scheduler_address}:{self.ports['scheduler']}/healthz"), deadline)
        self._wait("kube-controller-manager", self._default_sa_exists, deadline)
        self._wait("kwok", self._nodes_ready, deadline, interval=0.1)

    def _default_sa_exists(self) -> bool:
        sa = self.api.get("/api/v1/namespaces/default/serviceaccounts/default")
        return sa.get("metadata", {}).get("name") == "default"

    def _nodes_ready(self) -> bool:
        want = {n[0] for n in self.nodes}
        if not want:
            return True
        items = self.api.get("/api/v1/nodes")["items"]
        ready = {n["metadata"]["name"] for n in items if _node_ready(n)}
        return want <= ready

    # ---- nodes
    def node_object(self, name: str, labels: Mapping[str, str], extra: Mapping[str, Any]) -> dict:
        cap = dict(DEFAULT_CAPACITY)
        cap.update({k: str(v) for k, v in (extra.get("capacity") or {}).items()})
        h = int(hashlib.sha1(name.encode()).hexdigest(), 16)   # stable per-node fake InternalIP
        ip = f"10.{128 + h % 64}.{(h >> 8) % 256}.{(h >> 16) % 253 + 1}"
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                           "beta.kubernetes.io/arch": "amd64", "type": "kwok", **labels},
                "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                                "node.alpha.kubernetes.io/ttl": "0", **(extra.get("annotations") or {})},
            },
            "spec": {"taints": list(extra.get("taints") or [])},
            "status": {
                "capacity": cap, "allocatable": dict(cap),
                "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                             "kubeletVersion": f"v{K8S_VERSION}", "kubeProxyVersion": f"v{K8S_VERSION}",
                             "containerRuntimeVersion": str(extra.get("runtime") or DEFAULT_RUNTIME),
                             "osImage": "kwok simulated node",
                             "kernelVersion": "kwok", "machineID": "", "systemUUID": "", "bootID": ""},
            },
        }

    def add_nodes(self, nodes: Iterable[NodeSpec], *, wait: bool = True, timeout: float = 60.0,
                  _record: bool = True) -> list[str]:
        """Create simulated nodes through the API (kwok annotation, capacity, labels).
        Existing nodes are left alone. With wait, block until kwok reports them Ready."""
        specs = [_normalize_node(n) for n in nodes]
        objs = [self.node_object(*s) for s in specs]

        def create(obj: dict) -> None:
            for _ in range(50):
                try:
                    self.api.post("/api/v1/nodes", obj)
                    return
                except ApiError as e:
                    if e.status == 409:
                        return
                    if e.status in (429, 500, 503):
                        time.sleep(0.1)
                        continue
                    raise
            raise RuntimeError(f"could not create node {obj['metadata']['name']}")

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(create, objs))
        if _record:
            known = {n[0] for n in self.nodes}
            self.nodes += [s for s in specs if s[0] not in known]
            self._write_state()
        if wait:
            names = {s[0] for s in specs}
            deadline = time.monotonic() + timeout

            def ready() -> bool:
                items = self.api.get("/api/v1/nodes")["items"]
                return names <= {n["metadata"]["name"] for n in items if _node_ready(n)}
            self._wait("kwok", ready, deadline, interval=0.1)
        return [s[0] for s in specs]

    def set_node_status(self, name: str, *, allocatable: Optional[Mapping[str, Any]] = None,
                        capacity: Optional[Mapping[str, Any]] = None, runtime: Optional[str] = None) -> dict:
        """Play the node's kubelet: merge-patch the node's status subresource.

        ``allocatable`` / ``capacity`` keys are merged into what the node reports (a value
        of None removes that key), e.g. ``allocatable={"enflame.com/gcu": "8"}`` as a GCU
        device plugin would advertise it; ``runtime`` sets
        ``status.nodeInfo.containerRuntimeVersion``. kwok's heartbeat only rewrites
        conditions, addresses and daemon endpoints, so these stay. Returns the node."""
        def quantities(m: Mapping[str, Any]) -> dict:
            return {k: (None if v is None else str(v)) for k, v in m.items()}
        status: dict = {}
        if capacity is not None:
            status["capacity"] = quantities(capacity)
        if allocatable is not None:
            status["allocatable"] = quantities(allocatable)
        if runtime is not None:
            status["nodeInfo"] = {"containerRuntimeVersion": runtime}
        return self.api.patch(f"/api/v1/nodes/{urllib.parse.quote(name)}/status", {"status": status})

    # ---- conveniences for tests
    def kubectl(self, *args: str, input: Optional[str] = None, check: bool = True,
                timeout: float = 60.0) -> subprocess.CompletedProcess:
        r = subprocess.run([self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({r.returncode}):\n{r.stderr}{r.stdout}")
        return r

    def audit_offset(self) -> int:
        """Current size of the audit log: pass to audit_events(since=...) to see only later events."""
        try:
            return os.path.getsize(self.audit_log)
        except OSError:
            return 0

    def audit_events(self, since: int = 0, user: Optional[str] = ADMIN_USER) -> list[dict]:
        """Audit events (write verbs) after byte offset `since`, by `user` (None = everyone)."""
        out = []
        try:
            with open(self.audit_log, "rb") as f:
                f.seek(since)
                for line in f:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    if user is None or ev.get("user", {}).get("username") == user:
                        out.append(ev)
        except FileNotFoundError:
            pass
        return out

    def write_counts(self, since: int = 0, user: Optional[str] = ADMIN_USER) -> collections.Counter:
        """Counter of (verb, resource[/subresource]) for write requests, e.g.
        {("create", "daemonsets"): 1, ("patch", "daemonsets"): 2}."""
        c: collections.Counter = collections.Counter()
        for ev in self.audit_events(since, user):
            ref = ev.get("objectRef") or {}
            res = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            c[(ev.get("verb"), res)] += 1
        return c

    # ---- stop / state
    def _stop_processes(self) -> None:
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            c = self.components.get(name)
            if c is None or c.pid is None:
                continue
            kill_pid(c.pid, exe=None if c.proc is not None else c.exe, proc=c.proc, timeout=10)
        self.components.clear()
        if self.etcd_data_dir is not None and str(self.etcd_data_dir).startswith("/dev/shm/"):
            shutil.rmtree(self.etcd_data_dir, ignore_errors=True)
            self.etcd_data_dir = None

    def stop(self) -> None:
        """Kill every process (SIGTERM, then SIGKILL after 10s); keep workdir (logs, audit)."""
        self._stop_processes()
        self._started = False
        st = self.workdir / "state.json"
        if st.exists():
            st.unlink()

    def _state(self) -> dict:
        return {
            "workdir": str(self.workdir), "kubeconfig": self.kubeconfig, "server": self.server,
            "audit_log": self.audit_log if self.audit else None, "ports": self.ports,
            "etcd_data_dir": str(self.etcd_data_dir) if self.etcd_data_dir else None,
            "nodes": [list(node) for node in self.nodes], "detach": self.detach,
            "components": {n: {"pid": c.pid, "exe": c.exe, "log": str(c.log)} for n, c in self.components.items()},
            "timings": self.timings, "k8s_version": K8S_VERSION, "kwok_version": KWOK_VERSION,
            "scheduler_address": self.scheduler_address,
        }

    def _write_state(self) -> None:
        if not self.components:
            return
        write_json(self.workdir / "state.json", self._state())

    @classmethod
    def from_state_dir(cls, state_dir: Union[str, Path]) -> "LocalCluster":
        """Attach to a cluster started (detached) in state_dir; stop() then kills it."""
        st = json.loads((Path(state_dir) / "state.json").read_text())
        c = cls(st["workdir"], nodes=[tuple(n) for n in st["nodes"]], audit=bool(st.get("audit_log")),
                detach=True)
        c.ports = {k: int(v) for k, v in st["ports"].items()}
        c.etcd_data_dir = Path(st["etcd_data_dir"]) if st.get("etcd_data_dir") else None
        c.timings = st.get("timings", {})
        c.scheduler_address = st.get("scheduler_address", c.scheduler_address)
        for line in (c.workdir / "pki" / "tokens.csv").read_text().splitlines():
            parts = line.split(",")
            c.tokens[parts[2]] = parts[0]
        for name, info in st["components"].items():
            c.components[name] = _Component(name, info["exe"], [], Path(info["log"]), pid=int(info["pid"]))
        c._started = True
        return c

    def status(self) -> dict:
        comps = {n: ("running" if c.alive() else "dead") for n, c in self.components.items()}
        ready = False
        try:
            ready = self._apiserver_ready()
        except Exception:
            pass
        return {"components": comps, "apiserver_ready": ready, "kubeconfig": self.kubeconfig,
                "server": self.server if self.ports else None}


# --------------------------------------------------------------------------- probe

def probe_current_context(timeout: float = 5.0) -> tuple[bool, str]:
    """Does the current kube context (KUBECONFIG or ~/.kube/config; in a pod, its service
    account) answer ``GET /version``? Returns (answers, what was asked and what happened).
    Uses the ``kubernetes`` client (requirements.txt), else ``kubectl`` on PATH."""
    try:
        from kubernetes import client, config  # type: ignore[import-not-found]
    except ImportError:
        kubectl = shutil.which("kubectl")
        if not kubectl:
            return False, "cannot probe: neither the kubernetes Python client nor kubectl is installed"
        r = subprocess.run([kubectl, "version", f"--request-timeout={int(timeout)}s"], capture_output=True,
                           text=True, timeout=timeout + 10)
        return r.returncode == 0, ("kubectl version: " + (r.stdout if r.returncode == 0 else r.stderr).strip()[-300:])
    cfg = client.Configuration()
    where = ""
    try:
        config.load_kube_config(client_configuration=cfg)
        _, active = config.list_kube_config_contexts()
        where = f"context {active.get('name')!r} ({cfg.host})"
    except Exception as e:   # no kubeconfig, no current context, unreadable file ...
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return False, f"no usable kube context: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        try:
            config.load_incluster_config(client_configuration=cfg)
            where = f"in-cluster service account ({cfg.host})"
        except Exception as e2:
            return False, f"no usable kube context: {e2}"
    cfg.retries = False
    try:
        with client.ApiClient(cfg) as api:
            v = client.VersionApi(api).get_code(_request_timeout=timeout)
        return True, f"{where} answers: Kubernetes {v.git_version}"
    except Exception as e:
        reason = str(getattr(e, "reason", None) or e).strip()
        return False, f"{where} does not answer: {(reason.splitlines() or [type(e).__name__])[0][:300]}"


# --------------------------------------------------------------------------- CLI

def _cli_nodes(n: int, k: int, gcu_labels: Sequence[str], gcu_capacity: int = 0) -> list:
    if k > n:
        raise SystemExit(f"--gcu-nodes ({k}) must not exceed --nodes ({n})")
    labels = {GCU_LABEL: "true"}
    for kv in gcu_labels:
        key, _, val = kv.partition("=")
        labels[key] = val
    extra = {"capacity": {GCU_RESOURCE: str(gcu_capacity)}} if gcu_capacity > 0 else {}
    return ([(f"gcu-node-{i}", dict(labels), dict(extra)) for i in range(1, k + 1)]
            + [(f"cpu-node-{i}", {}) for i in range(1, n - k + 1)])


def _scheduler_command(cluster: LocalCluster, config: Optional[str], on_real_node: Optional[str]) -> int:
    import yaml

    from devtools.realnode import RealNode, RealNodeError, netns_name

    document = None
    if config:
        try:
            document = yaml.safe_load(Path(config).read_text())
        except (OSError, yaml.YAMLError) as e:
            print(f"--config {config}: cannot read it as YAML: {e}", file=sys.stderr)
            return 2
        if not isinstance(document, dict) or document.get("kind") != "KubeSchedulerConfiguration":
            print(f"--config {config}: not a KubeSchedulerConfiguration", file=sys.stderr)
            return 2
    netns, address = None, "127.0.0.1"
    if on_real_node:
        try:
            node = RealNode.from_state_dir(on_real_node)
            netns, address = netns_name(node.name), node.node_ip
        except (OSError, ValueError, KeyError, RealNodeError) as e:
            print(f"--on-real-node {on_real_node}: no real node's state there ({e})", file=sys.stderr)
            return 2
        if not Path(f"/run/netns/{netns}").exists():
            print(f"--on-real-node {on_real_node}: real node {node.name} is not running (no network namespace {netns}); "
                  "start it first (scripts/gcu-stack up --real-nodes N)", file=sys.stderr)
            return 2
    path = cluster.restart_scheduler(document, netns=netns, address=address)
    where = f"on real node {netns} ({address})" if netns else "on this machine's loopback"
    if document is None:
        print(f"kube-scheduler runs with its own flags again, {where}", file=sys.stderr)
    else:
        extenders = [e.get("urlPrefix") for e in cluster.scheduler_extenders()]
        print(f"kube-scheduler runs {path}, {where}; extenders: {extenders or 'none'}", file=sys.stderr)
    return 0


@exit_codes
def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.localcluster",
                                 description=f"Local Kubernetes {K8S_VERSION} control plane with kwok-simulated nodes.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start detached; prints the kubeconfig path on stdout")
    up.add_argument("--state-dir", required=True)
    up.add_argument("--nodes", type=int, default=3, help="total simulated nodes (default 3)")
    up.add_argument("--gcu-nodes", type=int, default=1,
                    help=f"how many of them are GCU nodes (label {GCU_LABEL}=true); default 1")
    up.add_argument("--gcu-label", action="append", default=[], metavar="KEY=VALUE",
                    help="extra label for GCU nodes (repeatable), e.g. enflame.com/gcu.present=true")
    up.add_argument("--gcu-capacity", type=int, default=0, metavar="N",
                    help=f"GCU nodes advertise N {GCU_RESOURCE} (as a running device plugin would); default none")
    up.add_argument("--no-audit", action="store_true")
    up.add_argument("--timeout", type=float, default=120.0)
    for name in ("down", "status"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", required=True)
    sch = sub.add_parser("scheduler", help="restart kube-scheduler with a KubeSchedulerConfiguration (e.g. the "
                         "stack's gcushareSchedulerExtender.schedulerConfiguration), or with its own flags again")
    sch.add_argument("--state-dir", required=True)
    sch.add_argument("--config", help="the configuration (YAML or JSON), as given to kube-scheduler --config; "
                                      "its clientConnection.kubeconfig is replaced by this cluster's. Without it: "
                                      "the scheduler as `up` started it")
    sch.add_argument("--on-real-node", metavar="NODE_STATE_DIR",
                     help="run it on that real node's host network, as on a control-plane node (127.0.0.1 is the "
                          "node's: its node ports, the GCU-share extender's URL)")
    pr = sub.add_parser("probe", help="exit 0 if the current kube context answers, 1 if not (reason on stderr)")
    pr.add_argument("--timeout", type=float, default=5.0)
    a = ap.parse_args(argv)
    if a.cmd == "probe":
        ok, what = probe_current_context(a.timeout)
        print(what, file=sys.stderr)
        return 0 if ok else 1
    state_dir = Path(a.state_dir).resolve()

    if a.cmd == "up":
        if (state_dir / "state.json").exists():
            c = LocalCluster.from_state_dir(state_dir)
            st = c.status()
            if st["apiserver_ready"] and all(v == "running" for v in st["components"].values()):
                print(f"already running: {c.server}", file=sys.stderr)
                print(c.kubeconfig)
                return 0
            print("stale state found, cleaning up", file=sys.stderr)
            c.stop()
        nodes = _cli_nodes(a.nodes, a.gcu_nodes, a.gcu_label, a.gcu_capacity)
        c = LocalCluster(state_dir, nodes=nodes, audit=not a.no_audit, detach=True)
        c.start(timeout=a.timeout)
        t = c.timings
        print(f"cluster up in {t.get('total', 0):.1f}s: {c.server}, {len(nodes)} nodes "
              f"({a.gcu_nodes} GCU), audit log {c.audit_log if c.audit else 'off'}", file=sys.stderr)
        print(f"export KUBECONFIG={c.kubeconfig}", file=sys.stderr)
        print(c.kubeconfig)
        return 0

    if not (state_dir / "state.json").exists():
        return nothing_running(a.cmd, say="nothing running")
    c = LocalCluster.from_state_dir(state_dir)
    if a.cmd == "scheduler":
        return _scheduler_command(c, a.config, a.on_real_node)
    if a.cmd == "down":
        c.stop()
        print("stopped", file=sys.stderr)
        return 0
    st = c.status()
    st["running"] = st["apiserver_ready"] and all(v == "running" for v in st["components"].values())
    print(json.dumps(st, indent=2))
    return 0 if st["running"] else 3


if __name__ == "__main__":
    sys.exit(main())
