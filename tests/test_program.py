"""The program (components/program.py): one explicit Kubernetes provider, type tokens, nothing for an empty spec."""

from harness import SEED_BLUEPRINT, run_program


def test_every_kubernetes_object_uses_the_one_explicit_provider(seed_run):
    (provider,) = seed_run.of_type("pulumi:providers:kubernetes")
    for registration in seed_run.k8s():
        assert registration.provider.startswith(provider.urn + "::")
    for component in [r for r in seed_run.registrations if r.type.startswith("gcu:components:")]:
        assert component.providers["kubernetes"].startswith(provider.urn + "::")


def test_kubeconfig_and_context_reach_the_provider(tmp_path):
    run = run_program({"blueprint": str(SEED_BLUEPRINT), "kubeconfig": "/etc/gcu/kubeconfig", "kubeContext": "lab"})
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "/etc/gcu/kubeconfig"
    assert provider.inputs["context"] == "lab"


def test_component_type_tokens(seed_run):
    tokens = {r.name: r.type for r in seed_run.registrations if r.type.startswith("gcu:")}
    assert tokens == {
        "enflame-gcu-resource": "gcu:stack:GcuResource",
        "nfd": "gcu:components:NodeFeatureDiscovery",
        "toolkit": "gcu:components:Toolkit",
        "devicePlugin": "gcu:components:DevicePlugin",
        "exporter": "gcu:components:Exporter",
        "gfd": "gcu:components:GcuFeatureDiscovery",
    }


def test_empty_spec_declares_no_objects():
    run = run_program({"spec": {}})
    assert run.k8s() == []
    assert run.outputs["readyResource"] == "0/0"
    assert run.outputs["resourceStatuses"] == []
