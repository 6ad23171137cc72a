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


def test_each_ignored_field_is_warned_about_once(monkeypatch):
    """The blueprint is resolved once per run: the checks and the declarations read the same plan."""
    import pulumi
    from harness import full_spec, run_full

    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warned.append(message))
    # A sub-part's version that the component's first-level version overrides (the seed's precedence),
    # and a sub-part namespace that is one per component.
    run_full(full_spec(**{"nightingale.version": "v1", "nightingale.agentd-deploy": {"version": "v2", "namespace": "other"}}))
    ignored = [m for m in warned if "is ignored" in m]
    assert sorted(ignored) == sorted(set(ignored)), ignored
    assert any("spec.nightingale.agentd-deploy.version is ignored" in m for m in ignored), ignored
    assert any("spec.nightingale.agentd-deploy.namespace is ignored" in m for m in ignored), ignored
