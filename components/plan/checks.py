"""Rules across fields and settings, checked on the one plan before any resource is declared."""

from __future__ import annotations

from ..errors import BlueprintError
from ..images import check_images
from ..settings import StackSettings
from . import objects, rules


def _node_ports(plan: objects.Plan) -> list[str]:
    """Two Services of the stack cannot own the same node port."""
    claimed: dict[int, str] = {}
    problems = []
    for component in plan.deployed:
        key = component.definition.key
        for workload in component.workloads:
            service = workload.definition.service
            if service is None or service.node_port is None:
                continue
            port = objects.node_port(service.node_port, plan.link_settings(key))
            owner = service.node_port.owner(key)
            if port in claimed:
                problems.append(f"{owner}: node port {port} is already used by {claimed[port]}; choose another")
            claimed[port] = owner
    return problems


def _component_checks(plan: objects.Plan) -> list[str]:
    return [problem for component in plan.deployed for problem in component.variant_problems] + [
        problem
        for component in plan.deployed
        if component.definition.checks is not None
        for problem in component.definition.checks(component, plan.link_settings(component.definition.key))
    ]


def check(settings: StackSettings) -> objects.Plan:
    """The plan of these settings, once every rule holds; BlueprintError naming each broken one otherwise."""
    plan = objects.build(settings)
    problems = settings.plain_text_secrets() + _component_checks(plan) + _node_ports(plan)
    # Every object the stack would declare, held to the rules of the API server, kubelet, Helm and SSA.
    problems += [p for p in rules.problems(plan) if p not in problems]
    if problems:
        raise BlueprintError(problems, settings.source)
    # Packages for the images to build are there, before any resource (seed: "cp: cannot stat").
    check_images(settings.options.images, settings.options.registry_password, settings.project_dir)
    return plan
