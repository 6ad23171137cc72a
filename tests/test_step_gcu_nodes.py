"""The GCU-node step (components/steps/gcu_nodes.py) under mocks: its inputs, outputs and place in the stack."""

from harness import CONTAINER_RUNTIME, GCU_NODES, SEED_BLUEPRINT, ClusterMocks, run_program, seed_spec


def test_seed_declares_both_provider_resources_with_readable_type_names():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)})
    nodes = run.single(GCU_NODES)
    assert nodes.inputs["components"] == ["devicePlugin", "exporter", "gfd", "toolkit"]
    assert nodes.inputs["requireDriver"] is True  # the seed does not deploy the driver
    assert nodes.inputs["driverLabel"] == "enflame.com/gcu.driver.present=true"
    runtime = run.single(CONTAINER_RUNTIME)
    assert runtime.inputs["docker"]["mode"] == "reload" and runtime.inputs["docker"]["transport"] == "pod"
    assert runtime.inputs["containerd"]["mode"] == "restart" and runtime.inputs["runtime"] == "auto"
    assert runtime.inputs["podImage"] == "artifact.enflame.cn/galaxy_docker_hub/gcu/gcu-runtime:latest"
    assert runtime.inputs["nodes"] == ["gcu-node-1", "gcu-node-2", "gcu-node-3"]
    assert "__provider" in runtime.inputs


def test_cluster_gcu_nodes_output_comes_from_the_node_resource():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=ClusterMocks(node_count=2))
    assert run.outputs["clusterGCUNodes"] == ["gcu-node-1", "gcu-node-2"]


def test_driver_deployed_means_no_pre_installed_driver_is_required():
    run = run_program({"spec": seed_spec(**{"driver.notDeploy": False})})
    assert run.single(GCU_NODES).inputs["requireDriver"] is False


def test_cluster_gcu_nodes_is_a_list_even_when_the_provider_reports_nothing():
    run = run_program({"blueprint": str(SEED_BLUEPRINT)}, mocks=ClusterMocks(dynamic=lambda args: {}))
    assert run.outputs["clusterGCUNodes"] == []
