"""A throwaway copy of the project as a Pulumi stack driven by the Automation API.

The stack uses the toolchain's CLI and plugins, a temporary PULUMI_HOME, a local file
backend and a passphrase secrets provider; it targets a given cluster and dockerd.
`engine_stack` gives the engine tests all of it at once: a local control plane, a private
dockerd and such a stack, destroyed and stopped again at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, Optional

from pulumi import automation as auto
from realservers import PROJECT_DIR, start_dockerd, stop_dockerd

PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "components", "blueprints", "policies")
TOOLCHAIN = PROJECT_DIR / "scripts" / "toolchain" / "pulumi.sh"
# What a simulated GCU node carries: NFD's Enflame PCI label and the driver's, and (third element of a node
# spec) the GCUs a running device plugin would advertise, which post-deploy validation waits for.
NFD_LABEL = "feature.node.kubernetes.io/pci-1e36.present"
DRIVER_LABEL = "enflame.com/gcu.driver.present"
GCU_NODE_LABELS = {NFD_LABEL: "true", DRIVER_LABEL: "true"}
GCUS = {"capacity": {"enflame.com/gcu": "4"}}


def pulumi_env(home: Path, backend: Path) -> dict[str, str]:
    exports = subprocess.run(
        [str(TOOLCHAIN), "env"], capture_output=True, text=True, check=True
    ).stdout
    env = {}
    for line in exports.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = os.path.expandvars(value.strip('"'))
    cli = Path(env["PATH"].split(":")[0]) / "pulumi"
    assert cli.exists(), f"no Pulumi CLI at {cli}: run scripts/toolchain.sh"
    subprocess.run([str(TOOLCHAIN), "install-plugins", str(home)], check=True)
    # pulumi-kubernetes leaves a copy of the kubeconfig in $TMPDIR each time its provider starts (scripts/gcu-stack
    # gives each command its own): the stack's test directory, not the machine's /tmp.
    private_tmp = home.parent / "tmp"
    private_tmp.mkdir(exist_ok=True)
    env.update(
        {
            "TMPDIR": str(private_tmp),
            "PULUMI_HOME": str(home),
            "PULUMI_BACKEND_URL": f"file://{backend}",
            "PULUMI_CONFIG_PASSPHRASE": "e2e-passphrase",
        }
    )
    return env


def toolchain_cli(env: dict[str, str]) -> auto.PulumiCommand:
    """The toolchain's CLI, for a workspace: the Automation API runs `pulumi version` from this process's PATH before a
    workspace's env applies, and a benchmark started straight after README's first command has none there."""
    return auto.PulumiCommand(root=str(Path(env["PATH"].split(":")[0]).parent))


def small_project(root: Path, name: str, program: str) -> tuple[Path, dict[str, str]]:
    """A Pulumi project `name` of one `__main__.py` in root/project, on this checkout's venv, with its own Pulumi home
    and file backend under root: (its folder, the environment its CLI runs with)."""
    project = root / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(f"name: {name}\nruntime:\n  name: python\n  options:\n"
                                         "    toolchain: pip\n    virtualenv: .venv\n")
    (project / "__main__.py").write_text(program)
    (project / ".venv").symlink_to(PROJECT_DIR / ".venv")
    for d in ("home", "backend"):
        (root / d).mkdir()
    return project, pulumi_env(root / "home", root / "backend")


def stack_config(cluster, dockerd) -> dict[str, auto.ConfigValue]:
    runtime = {
        "transport": "local",
        "mode": "reload",
        "daemonJson": str(dockerd.config_file),
        "dockerHost": dockerd.host,
        "pidFile": str(dockerd.pidfile),
        # The real runc under the enflame name: containers keep starting after activation.
        "runtimePath": dockerd.runc_path,
    }
    return {
        "gcu-stack:blueprint": auto.ConfigValue("blueprints/gcu-resource.json"),
        "gcu-stack:kubeconfig": auto.ConfigValue(cluster.kubeconfig),
        "gcu-stack:dockerRuntime": auto.ConfigValue(json.dumps(runtime)),
    }


def write_policy_config(path: Path, dockerd) -> None:
    # The test's docker lives under temporary directories: allow exactly those for the toolkit, and
    # containerd's default directories, which it mounts too while gcu-stack:containerRuntime is auto.
    docker_dirs = sorted({str(Path(dockerd.config_file).parent), str(Path(dockerd.host[len("unix://"):]).parent)})
    docker_dirs += ["/etc/containerd", "/run/containerd"]
    path.write_text(
        json.dumps(
            {
                "host-paths-allowed": {
                    "allowedHostPaths": {"toolkit": ["/usr/local/enflame", "/var/log/topscloud", *docker_dirs]}
                }
            }
        )
    )


def copy_project(project: Path) -> None:
    project.mkdir()
    for name in PROJECT_FILES:
        source = PROJECT_DIR / name
        if source.is_dir():
            shutil.copytree(source, project / name, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
        else:
            shutil.copy2(source, project / name)
    (project / ".venv").symlink_to(PROJECT_DIR / ".venv")
    (project / "policies" / ".venv").symlink_to(PROJECT_DIR / ".venv")


def prepare_stack(root: Path, cluster, dockerd, name: str = "e2e") -> tuple[auto.Stack, Path]:
    """A new stack of a fresh project copy under `root`, configured for `cluster` and `dockerd`."""
    copy_project(root / "project")
    (root / "home").mkdir()
    (root / "backend").mkdir()
    env = pulumi_env(root / "home", root / "backend")
    workspace = auto.LocalWorkspace(
        work_dir=str(root / "project"), pulumi_home=str(root / "home"), env_vars=env, pulumi_command=toolchain_cli(env)
    )
    stack = auto.Stack.create(name, workspace)
    stack.set_all_config(stack_config(cluster, dockerd))
    policy_config = root / "policy-config.json"
    write_policy_config(policy_config, dockerd)
    return stack, policy_config


@dataclass
class Engine:
    """A stack of a fresh project copy (`prepare_stack`) and the servers it targets."""

    stack: auto.Stack
    cluster: Any
    dockerd: Any
    root: Path
    policy_config: Path


@contextmanager
def local_servers(root: Path, nodes: list, *, audit: bool = False, **cluster_kwargs) -> Iterator[tuple[Any, Any]]:
    """A local control plane with `nodes` (devtools.localcluster, in root/cluster) and a private dockerd
    (root/docker); both stop when the block ends, however it ends."""
    from devtools.localcluster import LocalCluster

    cluster = LocalCluster(root / "cluster", nodes=nodes, audit=audit, **cluster_kwargs).start()
    dockerd = start_dockerd(root / "docker")
    try:
        yield cluster, dockerd
    finally:
        cluster.stop()
        stop_dockerd(root / "docker")


@contextmanager
def engine_stack(root: Path, nodes: list, name: str, *, audit: bool = False, check_destroy: bool = False,
                 **cluster_kwargs) -> Iterator[Engine]:
    """`local_servers` and a stack `name` for them. When the block ends normally the stack is destroyed
    (a failing destroy is ignored unless check_destroy); the servers stop however it ends."""
    with local_servers(root, nodes, audit=audit, **cluster_kwargs) as (cluster, dockerd):
        stack, policy_config = prepare_stack(root, cluster, dockerd, name=name)
        yield Engine(stack, cluster, dockerd, root, policy_config)
        destroy(stack, check=check_destroy)


class RealNodeStack(NamedTuple):
    cluster: Any
    node: Any
    stack: auto.Stack
    # join(name, labels, fake_gcus) -> a further real node started now, with the stand-in images (a node joining the
    # cluster after `up`); stopped, and held to leave nothing behind, with the first.
    join: Callable[..., Any]


@contextmanager
def real_node_stack(root: Path, node_name: str, labels: dict, spec: dict, *, name: str,
                    driver_versions: tuple[str, ...] = (), pulled_drivers: tuple[str, ...] = (),
                    upgrade_manager: bool = False, extra_tags: Optional[dict[str, str]] = None) -> Iterator[RealNodeStack]:
    """`local_servers` (one simulated CPU node) with a real GCU node `node_name` (4 stand-in GCUs, `labels`) that
    has the stand-in images of devtools/standin_node.py (with the stand-in driver's of each of `driver_versions`), and
    a stack `name` deploying `spec` with them (gcu-upgrade-manager's image too with `upgrade_manager`; each image of
    `extra_tags` under that second tag as well); the driver images of `pulled_drivers` (of `driver_versions`) are not
    imported but served by a registry (devtools/ociregistry) that every node pulls them from; yields
    (cluster, node, stack, join) before anything is deployed. The servers, the images and the stack are made before
    the machine's real-node lock is taken (shared: the node keeps to itself, /usr/local/enflame included), the node
    after. When the block ends normally the stack is destroyed; however it ends, the scheduler leaves the node's
    network (restart_scheduler may have put it there) and the nodes stop and must leave nothing behind."""
    from realnode_fixtures import real_node_machine_lock

    from devtools import standin_node
    from devtools.ociregistry import Registry
    from devtools.realnode import RealNode

    with local_servers(root, [("cpu-node-1", {})]) as (cluster, dockerd), ExitStack() as held:
        built = standin_node.build_images(dockerd, root / "build", driver_versions, upgrade_manager=upgrade_manager)
        for ref, tag in (extra_tags or {}).items():
            dockerd.docker("tag", ref, f"{ref.rpartition(':')[0]}:{tag}")
            built.append(f"{ref.rpartition(':')[0]}:{tag}")
        served = [standin_node.driver_image(version) for version in pulled_drivers]
        registry = held.enter_context(Registry(root / "registry")) if served else None
        for ref in served:
            registry.push(dockerd, ref)
        refs = [ref for ref in built if ref not in served]

        def ready(node: RealNode) -> RealNode:
            node.start()
            if registry:
                node.mirror(standin_node.REGISTRY_NAME, registry.port)
            node.import_images(dockerd, refs)
            return node
        stack, _ = prepare_stack(root, cluster, dockerd, name=name)
        stack.remove_config("gcu-stack:blueprint")
        stack.remove_config("gcu-stack:dockerRuntime")
        set_json_config(stack, "spec", spec)
        set_json_config(stack, "containerd", standin_node.containerd_settings())
        with real_node_machine_lock(shared=True):
            node = RealNode.for_cluster(cluster, root / "node", node_name, labels=labels, fake_gcus=4)
            nodes = [node]

            def join(joining: str, joining_labels: dict, fake_gcus: int) -> RealNode:
                late = RealNode.for_cluster(cluster, root / joining, joining, labels=joining_labels, fake_gcus=fake_gcus)
                nodes.append(late)
                return ready(late)

            try:
                ready(node)
                yield RealNodeStack(cluster, node, stack, join)
                destroy(stack)
            finally:
                if cluster.scheduler_address != "127.0.0.1":
                    cluster.restart_scheduler()
                left = {n.name: (n.stop(), n.leftovers()) for n in reversed(nodes)}
                assert not [n for n, (stopped, found) in left.items() if stopped or any(found.values())], left


def up_converged(stack: auto.Stack, **kwargs) -> auto.UpResult:
    """`pulumi up` (kwargs as Stack.up's), then `pulumi preview --expect-no-changes`: what a completed up made is
    what the program declares, so nothing is left to change (objects that never converge are GitOps users' first
    complaint about the anchors)."""
    result = stack.up(**{"on_output": lambda _: None, **kwargs})
    lines: list[str] = []
    try:
        stack.preview(expect_no_changes=True, diff=True, on_output=lines.append)
    except auto.CommandError as e:
        text = "\n".join(line.rstrip() for line in lines)
        raise AssertionError("`pulumi preview --expect-no-changes` after a completed `pulumi up` found changes (a "
                             f"perpetual diff):\n{text[-8000:]}\n{str(e)[-2000:]}") from e
    return result


def destroy(stack: auto.Stack, *, check: bool = False) -> None:
    """`pulumi destroy`; a CommandError is raised only with check."""
    try:
        stack.destroy(on_output=lambda _: None)
    except auto.CommandError:
        if check:
            raise


def set_json_config(stack: auto.Stack, key: str, value: Any) -> None:
    """gcu-stack:<key> set to `value` as JSON."""
    stack.set_config(f"gcu-stack:{key}", auto.ConfigValue(json.dumps(value)))


def outputs(stack: auto.Stack) -> dict:
    """The stack's outputs as plain values."""
    return {k: v.value for k, v in stack.outputs().items()}


def node(cluster, name: str) -> dict:
    """The Node object `name` as the API server has it."""
    return json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)


def changes(summary: dict) -> dict:
    """An update's resource changes without the unchanged ones."""
    return {op: n for op, n in summary.items() if op != "same" and n}
