"""Nightingale: the monitoring stack (six Deployments, their Services, MySQL's volume) in namespace `enflame`.

Prometheus scrapes every deployed component that publishes metrics (the exporter).
The database password comes from secret stack config and reaches pods only through a Secret.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..manifests import labels, metadata
from ..model import BuildContext, ComponentDef, ContainerDef, Extras, NodePort, PodAdditions, ResolvedComponent, Resources, ServiceDef, WorkloadDef
from ..spec import BaseFields, Model, ObjectName
from .common import http_ready, tcp_ready

DB_SECRET_KEY = "password"
PASSWORD_SETTING = "nightingaleDbPassword"
WEB_NODE_PORT = NodePort(30018, setting="nightingaleWebNodePort")
DEFAULT_HOST_PATH = "/var/lib/enflame/nightingale/mysql"


class HostPathVolume(Model):
    name: ObjectName = None
    hostpath: Optional[str] = None

    @model_validator(mode="after")
    def _absolute(self) -> "HostPathVolume":
        if self.hostpath is not None and not self.hostpath.startswith("/"):
            raise ValueError(f"hostpath {self.hostpath!r} must be an absolute path on the node")
        return self


class ClaimSpec(Model):
    name: ObjectName = None


class NightingaleSpec(BaseFields):
    agentd: Optional[BaseFields] = Field(None, alias="agentd-deploy")
    mysql: Optional[BaseFields] = Field(None, alias="mysql-deploy")
    nserver: Optional[BaseFields] = Field(None, alias="nserver-deploy")
    nwebapi: Optional[BaseFields] = Field(None, alias="nwebapi-deploy")
    prometheus: Optional[BaseFields] = Field(None, alias="prometheus-deploy")
    redis: Optional[BaseFields] = Field(None, alias="redis-deploy")
    mysql_pv: Optional[HostPathVolume] = Field(None, alias="mysql-pv")
    mysql_pvc: Optional[ClaimSpec] = Field(None, alias="mysql-pvc")


class NightingaleSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Set with `pulumi config set --secret`; required when Nightingale is deployed.
    db_password: Optional[str] = Field(None, alias=PASSWORD_SETTING, repr=False, json_schema_extra={"secret": True})
    web_node_port: int = Field(WEB_NODE_PORT.default, alias=WEB_NODE_PORT.setting, ge=30000, le=32767)
    storage: str = Field("10Gi", alias="nightingaleStorage", pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def checks(component: ResolvedComponent, settings: NightingaleSettings) -> list[str]:
    if not settings.db_password:
        key = f"gcu-stack:{PASSWORD_SETTING}"
        return [f"{key}: required when spec.nightingale is deployed; set it with `pulumi config set --secret {key} <password>`"]
    return []


def prometheus_config(scrape_targets: tuple[tuple[str, str, str], ...]) -> str:
    jobs: list[dict[str, Any]] = [{"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]}]
    for job, target, path in scrape_targets:
        jobs.append({"job_name": job, "metrics_path": path, "static_configs": [{"targets": [target]}]})
    return yaml.safe_dump({"global": {"scrape_interval": "30s"}, "scrape_configs": jobs}, sort_keys=False)


def extras(component: ResolvedComponent, context: BuildContext) -> Extras:
    spec, settings = component.spec, context.settings
    object_labels = labels(component, context.instance)
    names = {w.definition.part: w.name for w in component.workloads}
    pv_name = (spec.mysql_pv.name if spec.mysql_pv and spec.mysql_pv.name else None) or "mysql-pv"
    host_path = (spec.mysql_pv.hostpath if spec.mysql_pv and spec.mysql_pv.hostpath else None) or DEFAULT_HOST_PATH
    claim = (spec.mysql_pvc.name if spec.mysql_pvc and spec.mysql_pvc.name else None) or "mysql-pvc"
    secret_name = f"{component.name}-db"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(secret_name, component.namespace, object_labels),
        "type": "Opaque",
        # From secret stack config; it stays a Pulumi secret all the way into the Secret object.
        "stringData": {DB_SECRET_KEY: pulumi.Output.secret(settings.db_password)},
    }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata(pv_name, None, object_labels),
        "spec": {
            "capacity": {"storage": settings.storage},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": host_path, "type": "DirectoryOrCreate"},
        },
    }
    claim_manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(claim, component.namespace, object_labels),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": settings.storage}},
        },
    }
    return Extras(
        config_files={"prometheus.yml": prometheus_config(context.scrape_targets)},
        objects=[secret, volume, claim_manifest],
        pod=PodAdditions(
            env={
                "MYSQL_HOST": names["mysql"],
                "MYSQL_PORT": "3306",
                "REDIS_ADDR": f"{names['redis']}:6379",
                "PROMETHEUS_URL": f"http://{names['prometheus']}:9090",
                "NSERVER_ADDR": f"{names['nserver']}:19000",
            },
            secret_name=secret_name,
            claim_name=claim,
        ),
    )


def part(name: str, port: Optional[int], service: Optional[ServiceDef] = None, recreate: bool = False, **container: object) -> WorkloadDef:
    """One Nightingale Deployment: the sub-part `<name>-deploy` of the spec, its own image, a Service on `port`."""
    if service is None and port:
        service = ServiceDef("http" if name != "mysql" else "mysql", port)
    return WorkloadDef(
        kind="Deployment",
        part=name,
        default_name=name,
        recreate=recreate,
        containers=(
            ContainerDef(
                name=name,
                default_image=name,
                ports=((service.port_name, port),) if service else (),
                restricted=True,
                **container,  # type: ignore[arg-type]
            ),
        ),
        service=service,
    )


NIGHTINGALE = ComponentDef(
    key="nightingale",
    type_name="Nightingale",
    default_name="nightingale",
    default_image="nightingale",
    default_namespace="enflame",
    spec_model=NightingaleSpec,
    gcu_nodes_only=False,
    after=("exporter",),
    workloads=(
        part("agentd", None, resources=Resources("20m", "64Mi", "500m", "256Mi")),
        part(
            "mysql",
            3306,
            recreate=True,
            readiness=tcp_ready(3306),
            secret_env=(("MYSQL_ROOT_PASSWORD", DB_SECRET_KEY),),
            claim_mount="/var/lib/mysql",
            resources=Resources("100m", "256Mi", "1", "1Gi"),
        ),
        part("redis", 6379, readiness=tcp_ready(6379), resources=Resources("50m", "64Mi", "500m", "256Mi")),
        part(
            "prometheus",
            9090,
            args=("--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"),
            readiness=http_ready("/-/ready", 9090),
            config_mount="/etc/prometheus",
            scratch_mount="/prometheus",   # --storage.tsdb.path
            resources=Resources("100m", "256Mi", "1", "1Gi"),
        ),
        part(
            "nserver",
            19000,
            readiness=tcp_ready(19000),
            secret_env=(("MYSQL_PASSWORD", DB_SECRET_KEY),),
            resources=Resources("50m", "128Mi", "1", "512Mi"),
        ),
        # The web UI, reachable from outside the cluster.
        part(
            "nwebapi",
            18000,
            service=ServiceDef("http", 18000, node_port=WEB_NODE_PORT),
            readiness=tcp_ready(18000),
            secret_env=(("MYSQL_PASSWORD", DB_SECRET_KEY),),
            resources=Resources("50m", "128Mi", "1", "512Mi"),
        ),
    ),
    settings=NightingaleSettings,
    checks=checks,
    extras=extras,
)
