"""Object-level ordering: each component's workload depends on its predecessor's workload objects."""

import pytest

from components.chain import nearest_deployed, stages
from components.stack import AFTER
from harness import SEED_BLUEPRINT, run_program
from test_config import seed_spec

GCU_NODES = "pulumi-python:dynamic/gcu:GcuNodes"
DOCKER_RUNTIME = "pulumi-python:dynamic/gcu:DockerRuntime"


def workload(run, key):
    component = run.component(key)
    (found,) = [r for r in run.children(component.urn) if r.inputs.get("kind") in ("DaemonSet", "Deployment")]
    return found


def label(run, registration):
    """A chain link's name: the component owning a workload, or the bundled provider resource."""
    if registration.type == GCU_NODES:
        return "gcuNodes"
    if registration.type == DOCKER_RUNTIME:
        return "dockerRuntime"
    if registration.inputs.get("kind") in ("DaemonSet", "Deployment"):
        return run.by_urn(registration.parent).name
    return None


def depends(run, registration):
    found = {label(run, run.by_urn(urn)) for urn in registration.dependencies}
    return found - {None}


def waits_for(run, key):
    """Chain links `key`'s workload depends on, by the dependency list sent to the engine."""
    return depends(run, workload(run, key))


def single(run, type_):
    (found,) = run.of_type(type_)
    return found


def test_seed_order_nfd_nodes_toolkit_runtime_device_plugin_then_exporter_and_gfd():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    assert waits_for(run, "nfd") == set()
    assert depends(run, single(run, GCU_NODES)) == {"nfd"}
    assert waits_for(run, "toolkit") == {"gcuNodes"}  # the driver is not deployed
    # After the toolkit's DaemonSet; its node list comes from GcuNodes.
    assert depends(run, single(run, DOCKER_RUNTIME)) == {"toolkit", "gcuNodes"}
    # The device plugin must not start before the runtime is active.
    assert waits_for(run, "devicePlugin") == {"dockerRuntime"}
    assert waits_for(run, "exporter") == {"devicePlugin"}
    assert waits_for(run, "gfd") == {"devicePlugin"}


def test_both_provider_resources_come_before_the_device_plugin_and_are_children():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    assert run.by_urn(single(run, DOCKER_RUNTIME).parent).name == "toolkit"
    assert run.by_urn(single(run, GCU_NODES).parent).type == "gcu:stack:GcuResource"


def test_driver_slots_in_between_gcu_nodes_and_toolkit():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    assert waits_for(run, "driver") == {"gcuNodes"}
    assert waits_for(run, "toolkit") == {"driver"}


def test_skipping_the_device_plugin_makes_exporter_wait_for_the_runtime():
    run = run_program({"spec": seed_spec(**{"devicePlugin.notDeploy": True})})
    assert waits_for(run, "exporter") == {"dockerRuntime"}
    assert waits_for(run, "gfd") == {"dockerRuntime"}


def test_without_toolkit_there_is_no_runtime_step():
    run = run_program({"spec": seed_spec(**{"toolkit.notDeploy": True})})
    assert run.of_type(DOCKER_RUNTIME) == []
    assert waits_for(run, "devicePlugin") == {"gcuNodes"}


def test_with_nothing_else_deployed_only_the_node_labels_come_first():
    run = run_program({"spec": {"exporter": {}, "gfd": {}}})
    assert depends(run, single(run, GCU_NODES)) == set()
    assert waits_for(run, "exporter") == {"gcuNodes"}
    assert waits_for(run, "gfd") == {"gcuNodes"}


def test_dependencies_point_at_objects_never_at_components():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    component_urns = {r.urn for r in run.registrations if r.type.startswith("gcu:")}
    for registration in run.registrations:
        assert not component_urns & set(registration.dependencies), registration.urn
    # Components themselves carry no depends_on: the objects do.
    for registration in run.registrations:
        if registration.type.startswith("gcu:components:"):
            assert registration.dependencies == []


def test_workload_waits_for_its_own_rbac_and_config():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    deps = set(workload(run, "nfd").dependencies)
    for kind, name in [
        ("ServiceAccount", "nfd-service-account"),
        ("ClusterRoleBinding", "nfd-clusterrolebinding"),
        ("ConfigMap", "enflame-node-feature-discovery-config"),
        ("NodeFeatureRule", "enflame-gcu-present"),
    ]:
        assert run.one(kind, name).urn in deps


@pytest.mark.parametrize(
    "present, key, expected",
    [
        ({"nfd", "gcuNodes", "driver", "toolkit"}, "toolkit", ["driver"]),
        ({"nfd", "gcuNodes", "toolkit"}, "toolkit", ["gcuNodes"]),
        ({"gcuNodes", "toolkit", "exporter"}, "exporter", ["toolkit"]),
        ({"nfd", "exporter"}, "exporter", ["nfd"]),
        ({"exporter"}, "exporter", []),
    ],
)
def test_nearest_deployed(present, key, expected):
    assert nearest_deployed(key, AFTER, present) == expected


def test_stages_of_the_seed_chain():
    present = {"nfd", "gcuNodes", "toolkit", "devicePlugin", "exporter", "gfd"}
    assert stages(AFTER, present) == [["nfd"], ["gcuNodes"], ["toolkit"], ["devicePlugin"], ["exporter", "gfd"]]
