"""The stacks the service manages, through the Pulumi Automation API.

A GcuResource is a stack of this project in the service's backend, named as the resource (its metadata.name): the
stack holds the cluster it acts on and its settings (`gcu-stack:*`, in `Pulumi.<stack>.yaml` of `config_dir`: the
project directory, or in-cluster the operator's directory on the service's node while the program is the image's),
and the GcuResource exists while the stack has resources. Each call makes its own workspace (the Automation API's are
not meant to be shared between threads) on one Pulumi CLI, run through `bin/pulumi` of `shim_root` when given
(service/shim.py: holder records for its locks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from pulumi import automation as auto

from service.gum import GumError

# A GcuResource's name: a DNS-1123 label (what Kubernetes allowed for the custom resource), also a stack name.
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
WORKLOAD_TYPES = ("kubernetes:apps/v1:DaemonSet", "kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet")
API_VERSION = "topsops.enflame.com/v1"


def checked_name(name: str) -> str:
    if not NAME.match(name or ""):
        raise GumError(400, f"{name!r} is not a GcuResource name (lower-case letters, digits and '-', at most 63)")
    return name


def not_found(name: str, why: str = "") -> GumError:
    # gum's words (the custom resource's "not found"), then ours.
    return GumError(404, f'gcuresources.topsops.enflame.com "{name}" not found' + (f": {why}" if why else ""))


@dataclass
class StackStore:
    project_dir: Path
    env: dict[str, str]
    state_dir: Path
    shim_root: Optional[Path] = None
    # Where each stack's Pulumi.<stack>.yaml is; None: the project directory, as for the CLI.
    config_dir: Optional[Path] = None
    # In the cluster: the stack that runs this service (a GcuResource deleted from here leaves the service in it).
    own_stack: Optional[str] = None

    def __post_init__(self) -> None:
        root = str(self.shim_root) if self.shim_root else None
        self.command = auto.PulumiCommand(root=root, skip_version_check=True)
        # The CLI itself, for what runs pulumi without the Automation API (stackops' state export).
        self.pulumi_path = shutil.which("pulumi", path=self.env.get("PATH") or os.environ.get("PATH")) or "pulumi"
        # Each stack's recorded cluster (kubeconfig, context, UID), read from its state once: progress is polled.
        self.clusters: dict[str, dict] = {}

    # ------------------------------------------------------------------ reading

    def workspace(self, holder: str = "-") -> auto.LocalWorkspace:
        env = {**self.env, "GCU_HOLDER_STACK": holder}
        return auto.LocalWorkspace(work_dir=str(self.project_dir), env_vars=env, pulumi_command=self.command)

    def summaries(self) -> dict[str, auto.StackSummary]:
        return {s.name: s for s in self.workspace().list_stacks()}

    def summary(self, name: str) -> auto.StackSummary:
        """Stack `name`'s summary (one listing of the backend); 404 when the service has no such stack."""
        checked_name(name)
        found = self.summaries().get(name)
        if found is None:
            raise not_found(name, f"no stack {name} in this service's backend (create it with `GCU_STACK={name} "
                                  "scripts/gcu-stack up`, or PUT to a stack that exists)")
        return found

    def stack(self, name: str) -> auto.Stack:
        """The stack of GcuResource `name`; 404 when the service has none."""
        self.summary(name)
        return auto.Stack.select(name, self.workspace(name))

    def deployed(self, name: str) -> tuple[auto.Stack, auto.StackSummary]:
        """The stack of a GcuResource that exists (it has resources), and its summary."""
        summary = self.summary(name)
        if not summary.resource_count:
            raise not_found(name, f"stack {name} holds nothing (deleted, or never deployed: PUT a blueprint to install it)")
        stack = auto.Stack.select(name, self.workspace(name))
        if name == self.own_stack and self.holds_only_the_service(stack):
            raise not_found(name, f"stack {name} holds only this service (deleted, or never installed: PUT a blueprint "
                                  "to install it)")
        return stack, summary

    def holds_only_the_service(self, stack: auto.Stack) -> bool:
        """Whether the stack deploys nothing but this service's own part: its GcuResource is gone."""
        from components.catalog.upgrade_manager import UPGRADE_MANAGER
        from service.blueprints import deployed_keys

        values, secret_keys = self.config(stack)
        return deployed_keys(values, self.paths_dir, secret_keys) == {UPGRADE_MANAGER.key}

    @property
    def paths_dir(self) -> Path:
        """Where the stacks' Pulumi.<stack>.yaml are, and so where the CLI that set them reads their relative paths."""
        return self.config_dir or self.project_dir

    def config_file(self, name: str) -> Path:
        return self.paths_dir / f"Pulumi.{name}.yaml"

    def run_config(self, stack: auto.Stack, *args: str) -> str:
        """`pulumi config <args>` on the stack's own config file (the Automation API's config calls cannot name it)."""
        argv = ["config", *args, "--stack", stack.name, "--config-file", str(self.config_file(stack.name))]
        env = {**self.env, "GCU_HOLDER_STACK": stack.name}
        return self.command.run(argv, str(self.project_dir), env).stdout

    def config(self, stack: auto.Stack) -> tuple[dict[str, str], frozenset[str]]:
        """The stack's `gcu-stack:*` config (secrets decrypted, in memory only) and which keys are secret."""
        every = json.loads(self.run_config(stack, "--show-secrets", "--json") or "{}")
        values = {k: v for k, v in every.items() if k.startswith("gcu-stack:")}
        return {k: v["value"] for k, v in values.items()}, frozenset(k for k, v in values.items() if v.get("secret"))

    def names(self) -> list[str]:
        """The stacks that hold something, named as a GcuResource can be."""
        return sorted(s.name for s in self.summaries().values() if s.resource_count and NAME.match(s.name))

    def resources(self) -> list[dict]:
        """Every GcuResource: the deployed stacks whose resource bears their name (others are not the service's)."""
        found = []
        for name in self.names():
            try:
                found.append(self.gcu_resource(name))
            except GumError as error:
                if error.status != 404:
                    raise
        return found

    def gcu_resource(self, name: str) -> dict:
        """GcuResource `name` as gcu-operator showed it: its blueprint as spec, the stack outputs as status."""
        from components.errors import BlueprintError
        from components.settings import load_settings

        stack, summary = self.deployed(name)
        values, secret_keys = self.config(stack)
        try:
            settings = load_settings(values, self.paths_dir, secret_keys)
        except BlueprintError as error:
            raise GumError(500, f"stack {name}'s own config does not validate (fix it with `GCU_STACK={name} "
                                f"scripts/gcu-stack preview`): {error}") from None
        if settings.resource.metadata.name != name:
            raise not_found(name, f"stack {name} deploys the GcuResource {settings.resource.metadata.name!r}; the service "
                                  "manages a GcuResource through the stack of the same name")
        outputs = {k: v.value for k, v in stack.outputs().items()}
        document = settings.resource.model_dump(mode="json", by_alias=True, exclude_none=True)
        metadata = {**document.get("metadata", {}), "name": name}
        metadata["annotations"] = {
            "gcu-stack.enflame.com/stack": name,
            "gcu-stack.enflame.com/last-update": summary.last_update or "",
            "gcu-stack.enflame.com/cluster": json.dumps(outputs.get("cluster") or {}, sort_keys=True),
        }
        status = {k: v for k, v in outputs.items() if k != "cluster"}
        return {"apiVersion": API_VERSION, "kind": "GcuResource", "metadata": metadata, "spec": document.get("spec"),
                "status": status}

    def state(self, stack: auto.Stack) -> dict:
        return stack.export_stack().deployment or {}

    def live_object(self, name: str, kind: str) -> Any:
        """The live Kubernetes object(s) of one component (`kind`: its spec key, or gum's name for it)."""
        from components.catalog import COMPONENTS

        component = next((c for c in COMPONENTS if kind == c.key or kind in c.spec_aliases), None)
        if component is None:
            known = sorted({c.key for c in COMPONENTS} | {a for c in COMPONENTS for a in c.spec_aliases})
            raise GumError(400, f"unknown resource kind {kind!r}; one of: {', '.join(known)}")
        stack, _ = self.deployed(name)
        deployment = self.state(stack)
        token = f"gcu:components:{component.type_name}"
        workloads = [
            r for r in deployment.get("resources") or []
            if r.get("type") in WORKLOAD_TYPES and token in type_chain(r.get("urn", ""))
        ]
        if not workloads:
            raise GumError(404, f"GcuResource {name} deploys no {kind} workload (spec.{component.key} not deployed)")
        from kubernetes.dynamic import DynamicClient

        client = DynamicClient(self.core_api(self.cluster_of(name, deployment)).api_client)
        items = [self._read(client, r["outputs"]) for r in workloads]
        if len(items) == 1:
            return items[0]
        return {"apiVersion": "v1", "kind": "List", "items": items}

    def driver_states(self, name: str) -> dict:
        """Each node's driver-upgrade state now (the rollout's label on it), or why it cannot be read."""
        from components.providers.driver_rollout import STATE_LABEL

        try:
            api = self.core_api(self.clusters.get(name) or self.cluster_of(name, self.state(self.stack(name))))
            nodes = api.list_node(label_selector=STATE_LABEL).items
        except GumError as error:
            return {"error": error.message}
        except Exception as error:  # noqa: BLE001 - progress is best effort; the operation itself reports failures
            return {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        return {n.metadata.name: n.metadata.labels[STATE_LABEL] for n in nodes}

    def cluster_of(self, name: str, deployment: dict) -> dict:
        """The cluster stack `name` recorded (its guard's outputs in `deployment`), remembered for later reads."""
        from components.kube_target import pin
        from stackops.clusters import recorded

        found = recorded({"deployment": deployment}) or {}
        kubeconfig, context = found.get("kubeconfig"), found.get("context")
        if not isinstance(kubeconfig, (str, type(None))):
            raise GumError(501, "this stack's kubeconfig is given inline (a secret in its state): the service reads "
                                "live objects only for a stack whose gcu-stack:kubeconfig is a file")
        if kubeconfig and not Path(kubeconfig).is_file():
            # Recorded by a run elsewhere (the CLI on a node, the service in its pod): reach the cluster as this
            # service's own run would (in a pod, its credentials); the recorded UID still refuses any other cluster.
            kubeconfig, context = pin(None, None, self.env)
        self.clusters[name] = {"kubeconfig": kubeconfig, "context": context, "clusterUid": found.get("uid")}
        return self.clusters[name]

    def core_api(self, cluster: dict) -> Any:
        """A client for a recorded cluster (`cluster_of`), refusing any other (the stack's own guard's check)."""
        from components.providers.cluster import ClusterMismatch, checked_api

        try:
            api = checked_api(cluster, pool_size=2)
        except ClusterMismatch as error:
            raise GumError(409, str(error)) from None
        except Exception as error:  # noqa: BLE001 - a cluster that does not answer is the cluster's problem, said so
            raise GumError(503, f"cannot reach the stack's cluster ({type(error).__name__}: {str(error)[:300]})") from None
        return api

    @staticmethod
    def _read(client: Any, recorded: dict) -> dict:
        from kubernetes.dynamic.exceptions import NotFoundError

        meta = recorded.get("metadata") or {}
        api = client.resources.get(api_version=recorded["apiVersion"], kind=recorded["kind"])
        try:
            return api.get(name=meta["name"], namespace=meta.get("namespace")).to_dict()
        except NotFoundError:
            raise GumError(404, f"{recorded['kind']} {meta.get('namespace')}/{meta['name']} is in the stack's state but "
                                "not in the cluster (deleted by hand?): `scripts/gcu-stack up` puts it back") from None

    def history(self, name: str, limit: int = 50) -> list[dict]:
        stack = self.stack(name)
        return [
            {
                "version": u.version,
                "kind": u.kind,
                "startTime": u.start_time.isoformat() if u.start_time else None,
                "endTime": u.end_time.isoformat() if u.end_time else None,
                "result": u.result,
                "message": u.message,
                "resourceChanges": u.resource_changes or {},
                "environment": {k: v for k, v in (u.environment or {}).items() if k.startswith("gcu-stack.")},
            }
            for u in stack.history(page_size=limit, page=1, show_secrets=False)
        ]

    # ------------------------------------------------------------------ changing

    def policy_args(self, name: str) -> dict:
        packs = [str(self.project_dir / "policies")]
        config = self.state_dir / f"policy-{name}.json"
        return {"policy_packs": packs, "policy_pack_configs": [str(config)] if config.is_file() else None}

    def preview(self, name: str, values: dict[str, Any], on_event: Callable) -> auto.PreviewResult:
        """A preview of the stack with `values` as its gcu-stack config, leaving its own config as it is."""
        stack = self.stack(name)
        config_file = self.proposed_config_file(name, values)
        try:
            return stack.preview(on_event=on_event, config_file=str(config_file), **self.policy_args(name))
        finally:
            config_file.unlink(missing_ok=True)

    def proposed_config_file(self, name: str, values: dict[str, Any]) -> Path:
        """A copy of Pulumi.<stack>.yaml whose blueprint keys say `values`' (secrets stay as they are encrypted)."""
        import yaml

        from service.blueprints import BLUEPRINT_KEYS

        source = self.config_file(name)
        document = yaml.safe_load(source.read_text()) if source.is_file() else {}
        document = document or {}
        config = {k: v for k, v in (document.get("config") or {}).items() if k not in BLUEPRINT_KEYS}
        config.update({k: v for k, v in values.items() if k in BLUEPRINT_KEYS})
        document["config"] = config
        target = self.state_dir / "service" / f"preview-{name}-{id(values):x}.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(document, sort_keys=False))
        return target

    def apply_config(self, stack: auto.Stack, values: dict[str, Any]) -> None:
        """The blueprint keys of `values` into the stack's config (the others are the stack's own already)."""
        from service.blueprints import BLUEPRINT_KEYS

        current = json.loads(self.run_config(stack, "--json") or "{}")
        for key in BLUEPRINT_KEYS:
            if key in current and key not in values:
                self.run_config(stack, "rm", key)
        pairs = [f"{k}={v}" for k, v in values.items() if k in BLUEPRINT_KEYS]
        if pairs:
            self.run_config(stack, "set-all", *(a for pair in pairs for a in ("--plaintext", pair)))

    def up(self, name: str, on_event: Callable, message: str) -> auto.UpResult:
        self.clusters.pop(name, None)  # an up may record another cluster (adoption): read it again after
        stack = self.stack(name)
        return stack.up(on_event=on_event, message=message, config_file=str(self.config_file(name)),
                        **self.policy_args(name))

    def destroy(self, name: str, on_event: Callable, message: str) -> auto.DestroyResult:
        stack = self.stack(name)
        return stack.destroy(on_event=on_event, message=message, config_file=str(self.config_file(name)))


def type_chain(urn: str) -> list[str]:
    """The types of a resource and its parents from its URN (urn:pulumi:stack::project::a$b$type::name)."""
    parts = urn.split("::")
    return parts[2].split("$") if len(parts) >= 4 else []
