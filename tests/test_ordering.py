"""Object-level ordering: each component's workload depends on its predecessor's workload objects."""

import pytest

from components.catalog import CORE
from components.chain import nearest_deployed, stages
from harness import SEED_BLUEPRINT, run_program
from test_config import seed_spec

AFTER = {d.key: d.after for d in CORE}


def workload(run, key):
    component = run.component(key)
    (found,) = [r for r in run.children(component.urn) if r.inputs.get("kind") in ("DaemonSet", "Deployment")]
    return found


def waits_for(run, key):
    """Components whose workloads `key`'s workload depends on, by the engine's dependency list."""
    deps = set(workload(run, key).dependencies)
    owners = set()
    for registration in run.k8s():
        if registration.urn in deps and registration.inputs["kind"] in ("DaemonSet", "Deployment"):
            owners.add(run.by_urn(registration.parent).name)
    return owners


def test_seed_order_is_nfd_toolkit_device_plugin_then_exporter_and_gfd():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    assert waits_for(run, "nfd") == set()
    assert waits_for(run, "toolkit") == {"nfd"}  # the driver is not deployed: the nearest is nfd
    assert waits_for(run, "devicePlugin") == {"toolkit"}
    assert waits_for(run, "exporter") == {"devicePlugin"}
    assert waits_for(run, "gfd") == {"devicePlugin"}


def test_driver_slots_in_between_nfd_and_toolkit():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    assert waits_for(run, "driver") == {"nfd"}
    assert waits_for(run, "toolkit") == {"driver"}


def test_skipping_the_device_plugin_makes_exporter_wait_for_toolkit():
    run = run_program({"spec": seed_spec(**{"devicePlugin.notDeploy": True})})
    assert waits_for(run, "exporter") == {"toolkit"}
    assert waits_for(run, "gfd") == {"toolkit"}


def test_nothing_deployed_before_means_no_wait():
    run = run_program({"spec": {"exporter": {}, "gfd": {}}})
    assert waits_for(run, "exporter") == set()
    assert waits_for(run, "gfd") == set()


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
        ({"nfd", "driver", "toolkit"}, "toolkit", ["driver"]),
        ({"nfd", "toolkit"}, "toolkit", ["nfd"]),
        ({"toolkit", "exporter"}, "exporter", ["toolkit"]),
        ({"nfd", "exporter"}, "exporter", ["nfd"]),
        ({"exporter"}, "exporter", []),
    ],
)
def test_nearest_deployed(present, key, expected):
    assert nearest_deployed(key, AFTER, present) == expected


def test_stages_of_the_seed_chain():
    present = {"nfd", "toolkit", "devicePlugin", "exporter", "gfd"}
    assert stages(AFTER, present) == [["nfd"], ["toolkit"], ["devicePlugin"], ["exporter", "gfd"]]
