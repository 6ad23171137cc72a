"""The whole GcuResource: namespaces, then every link of the chain (components and steps) in graph order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pulumi

from .. import links
from ..chain import nearest_deployed
from ..images import declare_images
from ..model import ClusterAccess, ComponentDef, StepContext, StepResult
from ..plan.objects import Plan, with_built_images
from .component import ComponentArgs, GcuComponent
from .k8s import declare


@dataclass
class StackArgs:
    plan: Plan  # built and checked from the settings (components/plan/checks.py) before anything is declared
    # The pinned kubeconfig and context, and the recorded cluster's UID (components/program.py).
    cluster: ClusterAccess = field(default_factory=ClusterAccess)


class GcuStack(pulumi.ComponentResource):
    """gcu:stack:GcuResource — the stack's counterpart of one GcuResource object."""

    def __init__(self, name: str, args: StackArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gcu:stack:GcuResource", name, None, opts)
        settings = args.plan.settings
        # A component whose image is built here runs that build (by digest), not its spec's image.
        images = declare_images(
            settings.options.images, settings.options.registry_password, settings.project_dir,
            parent=self, deployed=set(args.plan.components),
        )
        self._plan = with_built_images(args.plan, images)
        self.deployed = {c.definition.key: c for c in self._plan.deployed}
        self._settings = settings
        self._namespaces = {
            o.name: declare(o.logical_name, o.manifest, pulumi.ResourceOptions(parent=self)) for o in self._plan.namespaces
        }
        present = links.present(self.deployed)
        self._step_context = StepContext(
            parent=self,
            after=[],
            settings=None,
            cluster=args.cluster,
            # An explicit provider for the bundled dynamic resources: the engine configures the
            # default `pulumi-python` provider with the whole stack config and keeps that in
            # state in plain text, secrets included (seen with gcu-stack:nightingaleDbPassword).
            host_provider=pulumi.ProviderResource("pulumi-python", "gcu-hoststate", {}, pulumi.ResourceOptions(parent=self))
            if present
            else None,
            deployed=tuple(self.deployed.values()),
            results={},
            instance=name,
        )
        gates: dict[str, list[pulumi.Resource]] = {}
        self.components: list[GcuComponent] = []
        self.steps: dict[str, StepResult] = self._step_context.results
        for key in links.ORDER:
            if key not in present:
                continue
            after = [r for p in nearest_deployed(key, links.GRAPH, present) for r in gates[p]]
            link = links.LINKS[key]
            if isinstance(link, ComponentDef):
                component = self._component(link, after)
                gates[key] = component.gate
                self.components.append(component)
            else:
                result = link.declare(self._step_context_for(key, after))
                gates[key] = [result.resource]
                self.steps[key] = result
        self.register_outputs({"components": [c.key for c in self.components]})

    def _link_settings(self, key: str):
        return self._settings.link_settings.get(key)

    def _step_context_for(self, key: str, after: list) -> StepContext:
        context = self._step_context
        return StepContext(
            parent=self, after=after, settings=self._link_settings(key), cluster=context.cluster,
            host_provider=context.host_provider, deployed=context.deployed, results=context.results,
            instance=context.instance,
        )

    def _component(self, definition: ComponentDef, after: list) -> GcuComponent:
        planned = self._plan.components[definition.key]
        step = self._step_context_for(definition.key, []) if (definition.then or definition.before) is not None else None
        return GcuComponent(
            definition.key,
            ComponentArgs(plan=planned, after=after, namespace=self._namespaces.get(planned.resolved.namespace), step=step),
            pulumi.ResourceOptions(parent=self),
        )

    def step_results(self) -> list[StepResult]:
        """Every step's result: the standalone ones and the components' own."""
        return [*self.steps.values(), *[c.step for c in self.components if c.step is not None]]

    def outputs(self) -> dict:
        """Stack outputs the components and steps add besides the status (e.g. the extender's URL)."""
        found: dict = {}
        owned = [c.then for c in links.LINKS.values() if isinstance(c, ComponentDef) and c.then is not None]
        for step in (*links.STEPS, *owned):
            found.update(dict(step.empty_outputs))
        for result in self.steps.values():
            found.update(result.outputs)
        for component in self.components:
            definition = component.resolved.definition
            if component.step is not None:
                found.update(component.step.outputs)
            if definition.outputs is not None:
                found.update(definition.outputs(component.resolved, self._link_settings(definition.key)))
        return found
