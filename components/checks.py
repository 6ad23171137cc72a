"""Rules across fields and settings, checked after the models and before any resource."""

from __future__ import annotations

from . import objects
from .component import node_port
from .errors import BlueprintError
from .images import check_images
from .settings import StackSettings


def _node_ports(settings: StackSettings) -> list[str]:
    """Two Services of the stack cannot own the same node port."""
    claimed: dict[int, str] = {}
    problems = []
    for component in settings.deployed():
        key = component.definition.key
        for workload in component.workloads:
            service = workload.definition.service
            if service is None or service.node_port is None:
                continue
            port = node_port(service.node_port, settings.link_settings.get(key))
            owner = service.node_port.owner(key)
            if port in claimed:
                problems.append(f"{owner}: node port {port} is already used by {claimed[port]}; choose another")
            claimed[port] = owner
    return problems


def _component_checks(settings: StackSettings) -> list[str]:
    return [
        problem
        for component in settings.deployed()
        if component.definition.checks is not None
        for problem in component.definition.checks(component, settings.link_settings.get(component.definition.key))
    ]


def check(settings: StackSettings) -> None:
    problems = settings.plain_text_secrets() + _component_checks(settings) + _node_ports(settings)
    # Every object the stack would declare, held to the rules of the API server, kubelet, Helm and SSA.
    problems += [p for p in objects.problems(settings) if p not in problems]
    if problems:
        raise BlueprintError(problems, settings.source)
    # Packages for the images to build are there, before any resource (seed: "cp: cannot stat").
    check_images(settings.options.images, settings.options.registry_password, settings.project_dir)
