"""Running the real program under Pulumi mocks and recording what it sends to the engine.

The recording monitor sees every RegisterResource request, including the
dependencies the engine would use for ordering, which `Mocks` alone does not.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional
from unittest import mock

import pulumi
from pulumi.runtime import mocks as runtime_mocks
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

PROJECT_DIR = Path(__file__).resolve().parent.parent
# Type tokens of the bundled dynamic resources.
GCU_NODES = "pulumi-python:dynamic/gcu:GcuNodes"
GCU_VALIDATION = "pulumi-python:dynamic/gcu:GcuValidation"
CONTAINER_RUNTIME = "pulumi-python:dynamic/gcu:ContainerRuntime"
DRIVER_UPGRADE = "pulumi-python:dynamic/gcu:DriverUpgrade"
CLUSTER_GUARD = "pulumi-python:dynamic/gcu:ClusterGuard"
# The cluster the mocked ClusterGuard reports (its kube-system UID and API server).
MOCK_CLUSTER = {"uid": "6b1c7c2e-3f0a-4d8e-9a51-2f4b8e0c9d17", "server": "https://mock-cluster:6443"}
# The seed's default blueprint (shared/seeds/gcu-resource.json), shipped with the project.
SEED_BLUEPRINT = PROJECT_DIR / "blueprints" / "gcu-resource.json"


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    dependencies: list[str]
    provider: str
    providers: dict[str, str]
    inputs: dict
    outputs: dict = field(default_factory=dict)
    aliases: list = field(default_factory=list)

    @property
    def manifest(self) -> dict:
        """The Kubernetes object as the provider would receive it."""
        body = {k: v for k, v in self.inputs.items() if k not in ("apiVersion", "kind")}
        return {"apiVersion": self.inputs.get("apiVersion"), "kind": self.inputs.get("kind"), **body}

    @property
    def k8s_name(self) -> Optional[str]:
        return (self.inputs.get("metadata") or {}).get("name")


class ClusterMocks(pulumi.runtime.Mocks):
    """A cluster whose workloads become ready; `node_count` GCU nodes run each DaemonSet."""

    def __init__(
        self,
        node_count: int = 3,
        ready: bool = True,
        dynamic: Optional[Callable[[Any], dict]] = None,
        applied: Optional[dict[str, str]] = None,
        failed_nodes: tuple[str, ...] = (),
    ):
        self.node_count = node_count
        # GCU nodes that fail post-deploy validation (GcuValidation reports them, as in warn mode).
        self.failed_nodes = tuple(failed_nodes)
        self.ready = ready
        self.dynamic = dynamic or self.default_dynamic
        # When pulumi-kubernetes last applied an object, by logical name (default: the creation day).
        self.applied = applied or {}

    def applied_at(self, name: str) -> str:
        return self.applied.get(name, "2026-11-20T00:00:00Z")

    @property
    def node_names(self) -> list[str]:
        return [f"gcu-node-{i}" for i in range(1, self.node_count + 1)]

    def default_dynamic(self, args) -> dict:
        """What the bundled providers report on a healthy cluster."""
        if args.typ.endswith(":GcuValidation"):
            return self.validation(args)
        if args.typ.endswith(":GcuNodes"):
            return {
                "nodes": self.node_names,
                "drivers": {n: True for n in self.node_names},
                "optedOut": [],
                "managedLabels": {},
                "drift": [],
            }
        if args.typ.endswith(":ClusterGuard"):
            return dict(MOCK_CLUSTER)
        if args.typ.endswith(":ContainerRuntime"):
            runtimes = {n: "docker" for n in self.node_names}
            return {"hosts": {}, "runtimes": runtimes, "unsupported": {}, "active": self.ready, "message": "mock", "drift": []}
        return {}

    def validation(self, args) -> dict:
        """GcuValidation: every covered node passed (`failed`: these nodes did not, as in warn mode)."""
        failed = set(self.failed_nodes)
        results = {
            n: {"passed": n not in failed, "capacity": n not in failed, "allocatable": None if n in failed else "4",
                "workload": "not run" if n in failed else "passed", "message": f"{n}: no enflame.com/gcu in allocatable after 120 s" if n in failed else "", "seconds": 1.0}
            for n in self.node_names
        }
        failures = [r["message"] for r in results.values() if not r["passed"]]
        return {"passed": not failures, "results": results, "skipped": {}, "failures": failures,
                "validatedAt": "2026-11-20T00:00:00+00:00", "drift": []}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        state = dict(args.inputs)
        kind = state.get("kind")
        if kind == "DaemonSet":
            done = self.node_count if self.ready else 0
            state["status"] = {
                "desiredNumberScheduled": self.node_count,
                "currentNumberScheduled": self.node_count,
                "numberReady": done,
                "updatedNumberScheduled": done,
                "numberAvailable": done,
                "numberMisscheduled": 0,
            }
        elif kind == "Deployment":
            replicas = (state.get("spec") or {}).get("replicas", 1)
            done = replicas if self.ready else 0
            state["status"] = {"replicas": replicas, "readyReplicas": done, "updatedReplicas": done}
        if args.typ == "kubernetes:helm.sh/v3:Release":
            state["status"] = {"status": "deployed" if self.ready else "pending-install", "namespace": state.get("namespace")}
        if args.typ.startswith("pulumi-python:dynamic") and self.dynamic is not None:
            state.update(self.dynamic(args))
        if isinstance(state.get("metadata"), dict):
            state["metadata"] = {
                **state["metadata"],
                "creationTimestamp": "2026-11-20T00:00:00Z",
                # What the API server records: pulumi-kubernetes' own apply, then a controller's status write.
                "managedFields": [
                    {"manager": "pulumi-kubernetes-7b2f", "operation": "Apply", "time": self.applied_at(args.name)},
                    {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-11-22T09:00:00Z", "subresource": "status"},
                ],
            }
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


class RecordingMonitor(runtime_mocks.MockMonitor):
    def __init__(self, mocks: ClusterMocks):
        super().__init__(mocks)
        self.registrations: list[Registration] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        registration = self.resources.get(response.urn)
        self.registrations.append(
            Registration(
                urn=response.urn,
                type=request.type,
                name=request.name,
                parent=request.parent,
                custom=bool(request.custom),
                dependencies=list(request.dependencies),
                provider=request.provider,
                providers=dict(request.providers),
                inputs=pulumi.runtime.rpc.deserialize_properties(request.object) if request.object else {},
                outputs=dict(registration.state) if registration is not None and registration.state else {},
                aliases=[*request.aliases, *request.aliasURNs],
            )
        )
        return response


@dataclass
class Run:
    registrations: list[Registration]
    # The stack outputs; empty when any of them is unknown (as in a preview before the providers ran).
    outputs: dict[str, Any]
    # The names of the stack outputs that are unknown (a preview).
    unknown_outputs: frozenset[str] = frozenset()

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def single(self, type_: str) -> Registration:
        (found,) = self.of_type(type_)
        return found

    def k8s(self) -> list[Registration]:
        """Kubernetes objects (Helm releases and the provider are not objects)."""
        return [r for r in self.registrations if r.type.startswith("kubernetes:") and r.custom and "kind" in r.inputs]

    def one(self, kind: str, name: str) -> Registration:
        found = [r for r in self.k8s() if r.inputs.get("kind") == kind and r.k8s_name == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}: {[r.urn for r in self.k8s()]}"
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.registrations if r.urn == urn)

    def component(self, key: str) -> Registration:
        return next(r for r in self.registrations if r.type.startswith("gcu:components:") and r.name == key)

    def children(self, parent_urn: str) -> list[Registration]:
        return [r for r in self.registrations if r.parent == parent_urn]


def _config_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_program(
    config: dict[str, Any],
    *,
    preview: bool = False,
    mocks: Optional[ClusterMocks] = None,
    secret_keys: tuple[str, ...] = (),
    project_dir: Path = PROJECT_DIR,
) -> Run:
    """Run components.program.main() under fresh mocks with `gcu-stack:<key>` config."""
    from components.program import main

    runtime_settings.ROOT.set(None)
    runtime_settings.SETTINGS.rpc_manager.clear()
    runtime_settings.SETTINGS.outputs.clear()
    pulumi.runtime.set_all_config(
        {f"gcu-stack:{k}": _config_text(v) for k, v in config.items()},
        [f"gcu-stack:{k}" for k in secret_keys],
    )
    monitor = RecordingMonitor(mocks or ClusterMocks())
    pulumi.runtime.set_mocks(monitor.mocks, project="gcu-stack", stack="test", preview=preview, monitor=monitor)
    captured: dict[str, Any] = {}
    unknown: set[str] = set()

    def program() -> None:
        main(project_dir)
        root = runtime_settings.get_root_resource()
        captured.update(_sync_await(pulumi.Output.from_input(root.outputs).future()) or {})
        unknown.update(k for k, v in root.outputs.items() if not _sync_await(pulumi.Output.from_input(v).is_known()))

    # The program pins the ambient kube context (components/kube_target.py): none here, whatever this machine has.
    try:
        with mock.patch.dict(os.environ, {"HOME": str(PROJECT_DIR / "tests" / "no-such-home")}):
            os.environ.pop("KUBECONFIG", None)
            _sync_await(run_pulumi_func(program))
    except Exception as error:
        # What had been declared when it failed (a bad blueprint must have declared nothing).
        error.registrations = monitor.registrations  # type: ignore[attr-defined]
        raise
    return Run(monitor.registrations, captured, frozenset(unknown))


# ---------------------------------------------------------------------------- blueprints for tests

SEED = json.loads(SEED_BLUEPRINT.read_text())
DELETE = object()  # seed_spec(**{path: DELETE}) removes the key
PASSWORD = "s3cr3t-Db-pa55"  # Nightingale's database password in tests (secret config)
DIGEST = "sha256:" + "0123456789abcdef" * 4  # an image digest, for blueprints pinned by digest


def seed_spec(**changes: Any) -> dict:
    """The seed's spec with dotted-path changes, e.g. seed_spec(**{"exporter.version": "2.0"})."""
    spec = json.loads(json.dumps(SEED["spec"]))
    for path, value in changes.items():
        node = spec
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return spec


def full_spec(**changes: Any) -> dict:
    """The seed with Nightingale, GCU-share (device plugin off) and Volcano turned on."""
    base = {
        "nightingale.notDeploy": False,
        "gcusharePlugin.notDeploy": False,
        "gcushareScheduler.notDeploy": False,
        "devicePlugin.notDeploy": True,
        "volcano.notDeploy": False,
    }
    return seed_spec(**{**base, **changes})


def run_full(spec: Optional[dict] = None, **config: Any) -> "Run":
    return run_program(
        {"spec": spec or full_spec(), "nightingaleDbPassword": PASSWORD, **config},
        secret_keys=("nightingaleDbPassword",),
    )


def fails(config: dict, *expected: str) -> str:
    """The program fails with every expected fragment and declares nothing but the stack."""
    import pytest

    with pytest.raises(pulumi.RunError) as caught:
        run_program(config)
    message = str(caught.value)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    assert [r.type for r in caught.value.registrations] == ["pulumi:pulumi:Stack"], "declared something before failing"
    return message


def pod_spec(registration: Registration) -> dict:
    return registration.inputs["spec"]["template"]["spec"]


GCU_REPO = "artifact.enflame.cn/galaxy_docker_hub/gcu"
ENFLAME_REPO = "artifact.enflame.cn/enflame_docker_images/enflame"


def daemonsets(run: Run) -> dict[str, Registration]:
    return {r.k8s_name: r for r in run.k8s() if r.inputs["kind"] == "DaemonSet"}
