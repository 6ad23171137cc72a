"""Enflame's Volcano: upstream's Helm chart (controller, admission webhook, scheduler) as one release."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..config import one_setting
from ..model import BuildContext, ComponentDef, Extras, ResolvedComponent
from ..names import DEFAULT_PULL_POLICY, DEFAULT_REPOSITORY, DEFAULT_VERSION
from ..resolve import effective
from ..spec import DNS1035_LABEL, BaseFields, is_digest, reference_problem

PARTS = {"controller": "vc-controller-manager", "admission": "vc-webhook-manager", "scheduler": "vc-scheduler"}


class VolcanoSpec(BaseFields):
    controller: Optional[BaseFields] = None
    admission: Optional[BaseFields] = None
    scheduler: Optional[BaseFields] = None


class VolcanoChartOptions(BaseModel):
    """`gcu-stack:volcanoChart`: where Volcano's official Helm chart comes from."""

    model_config = ConfigDict(extra="forbid")

    chart: str = "volcano"
    repository: str = "https://volcano-sh.github.io/helm-charts"
    version: str = "1.9.0"
    # A chart archive (.tgz) for air-gapped clusters, relative to the project directory; wins over repository.
    path: Optional[str] = None
    timeout_seconds: int = Field(600, alias="timeoutSeconds", ge=30)

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        # Resolved once, against the project directory the settings are loaded for.
        if value is None:
            return None
        path = Path(value).expanduser()
        project_dir = (info.context or {}).get("project_dir")
        return str(path if path.is_absolute() or project_dir is None else Path(project_dir) / path)


VolcanoSettings = one_setting("VolcanoSettings", "chart", "volcanoChart", VolcanoChartOptions)


def images(component: ResolvedComponent) -> dict[str, dict[str, str]]:
    """Per Volcano part: registry, image path, tag and pull policy, by the seed's precedence."""
    spec = component.spec
    found = {}
    for part, default_image in PARTS.items():
        sub = getattr(spec, part)
        where = f"spec.volcano.{part}"
        repository = effective(spec, sub, "repository", where) or DEFAULT_REPOSITORY
        registry, _, path = repository.partition("/")
        found[part] = {
            "registry": registry,
            "image": "/".join(p for p in (path, effective(spec, sub, "image", where) or default_image) if p),
            "tag": effective(spec, sub, "version", where) or DEFAULT_VERSION,
            "pullPolicy": effective(spec, sub, "image_pull_policy", where) or DEFAULT_PULL_POLICY,
        }
    return found


# The chart names objects after the release: its admission Service `<release>-admission-service`
# must be a DNS-1035 label (at most 63), so the release name is one of at most 63 - 18 characters.
SERVICE_SUFFIX = "-admission-service"
RELEASE_NAME_MAX = 63 - len(SERVICE_SUFFIX)


def _release_name_problems(component: ResolvedComponent) -> list[str]:
    name = component.name
    if len(name) <= RELEASE_NAME_MAX and DNS1035_LABEL.match(name):
        return []
    return [
        f"{component.name_from}: {name!r} names the Volcano Helm release, and the chart names its admission "
        f"Service `<name>{SERVICE_SUFFIX}`, a DNS-1035 label: use at most {RELEASE_NAME_MAX} lower-case letters, "
        "digits and '-', starting with a letter (no '.')"
    ]


def _digest_problems(component: ResolvedComponent) -> list[str]:
    """The chart builds each image as `<registry>/<image>:<tag>`: it has no place for a digest."""
    spec, problems = component.spec, []
    for where, model in (("spec.volcano", spec), *((f"spec.volcano.{p}", getattr(spec, p)) for p in PARTS)):
        if model is None:
            continue
        if is_digest(model.version):
            problems.append(
                f"{where}.version: Volcano's chart takes a tag for its three images (`<registry>/<image>:<tag>`), "
                "not a digest; set a tag"
            )
        if model.image and "@" in model.image:
            problems.append(f"{where}.image: Volcano's chart appends `:<tag>` to the image name, so it cannot carry a digest; drop `@...`")
    return problems


def checks(component: ResolvedComponent, settings: VolcanoSettings) -> list[str]:
    problems = _release_name_problems(component) + _digest_problems(component)
    found = images(component)
    if not problems:
        for part, image in found.items():
            reference = f"{image['registry']}/{image['image']}:{image['tag']}"
            why = reference_problem(reference)
            if why:
                problems.append(f"spec.volcano.{part}: the chart's image reference {reference!r} is refused by the kubelet: {why}")
    # Volcano's chart takes one registry, one tag and one pull policy for its three images.
    for key, label in (("registry", "repository host"), ("tag", "version"), ("pullPolicy", "imagePullPolicy")):
        seen = {part: image[key] for part, image in found.items()}
        if len(set(seen.values())) > 1:
            listed = ", ".join(f"spec.volcano.{part}: {value}" for part, value in seen.items())
            problems.append(f"spec.volcano: the Volcano chart needs one {label} for controller, admission and scheduler ({listed})")
    if settings.chart.path and not Path(settings.chart.path).exists():
        problems.append(f"gcu-stack:volcanoChart.path: chart archive {settings.chart.path} does not exist")
    return problems


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    chart = context.settings.chart
    found = images(component)
    first = found["controller"]  # the chart takes one registry, tag and pull policy (see checks)
    values = {
        "basic": {
            "image_registry": first["registry"],
            "image_tag_version": first["tag"],
            "image_pull_policy": first["pullPolicy"],
            "controller_image_name": found["controller"]["image"],
            "admission_image_name": found["admission"]["image"],
            "scheduler_image_name": found["scheduler"]["image"],
        },
    }
    release: dict[str, Any] = {
        "name": component.name,
        "namespace": component.namespace,
        "values": values,
        "timeout": chart.timeout_seconds,
    }
    if chart.path:
        release["chart"] = chart.path
    else:
        release.update(chart=chart.chart, version=chart.version, repository=chart.repository)
    return Extras(releases=[release])


VOLCANO = ComponentDef(
    key="volcano",
    type_name="Volcano",
    default_name="volcano",
    default_image="vc-controller-manager",
    default_namespace="volcano-system",
    spec_model=VolcanoSpec,
    gcu_nodes_only=False,
    after=("devicePlugin", "gcusharePlugin"),
    # Upstream's own chart (CRDs, admission webhook and its certificates): one Helm release.
    workloads=(),
    settings=VolcanoSettings,
    checks=checks,
    extras=extras,
    # The chart's pods do not all set restricted-level security contexts.
    pod_security="baseline",
)
