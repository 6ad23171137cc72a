"""The stack (components/declare/stack.py): each link waits for the objects of its nearest deployed predecessors."""

from harness import CLUSTER_GUARD, CONTAINER_RUNTIME, DRIVER_UPGRADE, GCU_NODES, SEED_BLUEPRINT, run_program, seed_spec


def workload(run, key):
    component = run.component(key)
    (found,) = [r for r in run.children(component.urn) if r.inputs.get("kind") in ("DaemonSet", "Deployment")]
    return found


def label(run, registration):
    """A chain link's name: the component owning a workload, or the bundled provider resource."""
    if registration.type == GCU_NODES:
        return "gcuNodes"
    if registration.type == CONTAINER_RUNTIME:
        return "containerRuntime"
    if registration.type == DRIVER_UPGRADE:
        return "driverUpgrade"
    if registration.inputs.get("kind") in ("DaemonSet", "Deployment"):
        return run.by_urn(registration.parent).name
    return None


def depends(run, registration):
    found = {label(run, run.by_urn(urn)) for urn in registration.dependencies}
    return found - {None}


def waits_for(run, key):
    """Chain links `key`'s workload depends on, by the dependency list sent to the engine."""
    return depends(run, workload(run, key))



def test_seed_order_nfd_nodes_toolkit_runtime_device_plugin_then_exporter_and_gfd():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    assert waits_for(run, "nfd") == set()
    assert depends(run, run.single(GCU_NODES)) == {"nfd"}
    assert waits_for(run, "toolkit") == {"gcuNodes"}  # the driver is not deployed
    # After the toolkit's DaemonSet; its node list comes from GcuNodes.
    assert depends(run, run.single(CONTAINER_RUNTIME)) == {"toolkit", "gcuNodes"}
    # The device plugin must not start before the runtime is active.
    assert waits_for(run, "devicePlugin") == {"containerRuntime"}
    assert waits_for(run, "exporter") == {"devicePlugin"}
    assert waits_for(run, "gfd") == {"devicePlugin"}


def test_both_provider_resources_come_before_the_device_plugin_and_are_children():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    assert run.by_urn(run.single(CONTAINER_RUNTIME).parent).name == "toolkit"
    assert run.by_urn(run.single(GCU_NODES).parent).type == "gcu:stack:GcuResource"


def test_driver_slots_in_between_gcu_nodes_and_toolkit():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    assert waits_for(run, "driver") == {"gcuNodes"}
    # The toolkit waits for the driver's step: the driver at its version on every GCU node.
    assert waits_for(run, "toolkit") == {"driverUpgrade"}
    upgrade = run.single(DRIVER_UPGRADE)
    assert run.by_urn(upgrade.parent).name == "driver"
    assert {label(run, run.by_urn(u)) for u in upgrade.dependencies} >= {"driver", "gcuNodes"}


def test_skipping_the_device_plugin_makes_exporter_wait_for_the_runtime():
    run = run_program({"spec": seed_spec(**{"devicePlugin.notDeploy": True})})
    assert waits_for(run, "exporter") == {"containerRuntime"}
    assert waits_for(run, "gfd") == {"containerRuntime"}


def test_without_toolkit_there_is_no_runtime_step():
    run = run_program({"spec": seed_spec(**{"toolkit.notDeploy": True})})
    assert run.of_type(CONTAINER_RUNTIME) == []
    assert waits_for(run, "devicePlugin") == {"gcuNodes"}


def test_with_nothing_else_deployed_only_the_node_labels_come_first():
    run = run_program({"spec": {"exporter": {}, "gfd": {}}})
    assert depends(run, run.single(GCU_NODES)) == set()
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


def test_inline_kubeconfig_is_a_secret_in_provider_inputs():
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "kubeconfig": "apiVersion: v1\nkind: Config\n"})
    from pulumi.runtime.rpc import _special_secret_sig, _special_sig_key

    # It reaches the engine marked secret, so state keeps it encrypted.
    for type_ in (GCU_NODES, CONTAINER_RUNTIME):
        value = run.single(type_).inputs["kubeconfig"]
        assert value[_special_sig_key] == _special_secret_sig


def test_empty_spec_declares_no_provider_resources():
    run = run_program({"spec": {}})
    assert run.of_type(GCU_NODES) == [] and run.of_type(CONTAINER_RUNTIME) == []
    assert run.outputs["clusterGCUNodes"] == []


def test_bundled_resources_use_an_explicit_provider_not_the_config_carrying_default():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    providers = {p.name: p for p in run.of_type("pulumi:providers:pulumi-python")}
    assert set(providers) == {"gcu-hoststate", "gcu-cluster"}
    assert all(p.inputs == {} for p in providers.values())
    for type_ in (GCU_NODES, CONTAINER_RUNTIME):
        assert run.single(type_).provider.startswith(providers["gcu-hoststate"].urn + "::")
    for guard in run.of_type(CLUSTER_GUARD):
        assert guard.provider.startswith(providers["gcu-cluster"].urn + "::")
