"""Rules across fields and settings, checked after the models and before any resource."""

from __future__ import annotations

from pathlib import Path

from .catalog import EXPORTER_NODE_PORT, VOLCANO
from .errors import BlueprintError
from .extras import volcano_images
from .images import check_images
from .resolve import resolve
from .settings import NAMESPACE, StackSettings
from .spec import deployed

DB_PASSWORD_KEY = f"{NAMESPACE}:nightingaleDbPassword"


def _nightingale(settings: StackSettings) -> list[str]:
    if not deployed(settings.resource.spec.nightingale):
        return []
    password = settings.options.nightingale_db_password
    if not password:
        return [
            f"{DB_PASSWORD_KEY}: required when spec.nightingale is deployed; set it with "
            f"`pulumi config set --secret {DB_PASSWORD_KEY} <password>`"
        ]
    if DB_PASSWORD_KEY not in settings.secret_keys:
        return [
            f"{DB_PASSWORD_KEY}: is stored in plain text; set it again with "
            f"`pulumi config set --secret {DB_PASSWORD_KEY} <password>`"
        ]
    return []


def _volcano(settings: StackSettings) -> list[str]:
    spec = settings.resource.spec.volcano
    if not deployed(spec):
        return []
    images = volcano_images(resolve(VOLCANO, spec, "spec.volcano"))
    problems = []
    # Volcano's chart takes one registry, one tag and one pull policy for its three images.
    for key, label in (("registry", "repository host"), ("tag", "version"), ("pullPolicy", "imagePullPolicy")):
        seen = {part: image[key] for part, image in images.items()}
        if len(set(seen.values())) > 1:
            listed = ", ".join(f"spec.volcano.{part}: {value}" for part, value in seen.items())
            problems.append(f"spec.volcano: the Volcano chart needs one {label} for controller, admission and scheduler ({listed})")
    if settings.options.volcano_chart.path:
        path = settings.options.volcano_chart.resolved_path(str(settings.project_dir))
        if not Path(path).exists():
            problems.append(f"{NAMESPACE}:volcanoChart.path: chart archive {path} does not exist")
    return problems


def _node_ports(settings: StackSettings) -> list[str]:
    spec = settings.resource.spec
    options = settings.options
    claimed: dict[int, str] = {}
    problems = []
    for port, owner, present in (
        (EXPORTER_NODE_PORT, "spec.exporter (fixed 30940)", deployed(spec.exporter)),
        (options.nightingale_web_node_port, f"{NAMESPACE}:nightingaleWebNodePort", deployed(spec.nightingale)),
        (options.gcushare_scheduler_node_port, f"{NAMESPACE}:gcushareSchedulerNodePort", deployed(spec.gcushare_scheduler)),
    ):
        if not present:
            continue
        if port in claimed:
            problems.append(f"{owner}: node port {port} is already used by {claimed[port]}; choose another")
        claimed[port] = owner
    return problems


def check(settings: StackSettings) -> None:
    problems = _nightingale(settings) + _volcano(settings) + _node_ports(settings)
    if problems:
        raise BlueprintError(problems, settings.source)
    # Packages for the images to build are there, before any resource (seed: "cp: cannot stat").
    check_images(settings.options.images, settings.options.registry_password, settings.project_dir, settings.secret_keys)
