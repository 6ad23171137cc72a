"""The KubeSchedulerConfiguration the stack exports for the GCU-share extender, read by the real kube-scheduler (the
version the suite builds) against a real control plane: it starts with the document as exported, only
`clientConnection.kubeconfig` pointed at this cluster's, and its /configz reports the extender. The document of
earlier releases (v1beta1) is refused by the same binary, as an operator's kube-scheduler refused it."""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from components.catalog.gcushare_scheduler import BIND_VERB, FILTER_VERB, extender_url, scheduler_configuration
from components.names import GCUSHARE_RESOURCE
from devtools import free_port, kill_pid
from devtools.localcluster import LocalCluster, configz_extenders


def configz(port: int) -> dict:
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # its own self-signed serving certificate
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/configz", context=insecure, timeout=5) as answer:
        return json.loads(answer.read())


def start_scheduler(cluster: LocalCluster, document: dict, where: Path) -> tuple[subprocess.Popen, int, Path]:
    config = where / "gcushare-scheduler.yaml"
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    port, log = free_port(), where / "kube-scheduler.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [cluster.toolchain.kube_scheduler, "--config", str(config), "--secure-port", str(port),
             "--bind-address", "127.0.0.1", "--cert-dir", str(where / "pki"),
             "--authorization-always-allow-paths", "/configz,/healthz"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    return process, port, log


def stop(process: subprocess.Popen) -> None:
    kill_pid(process.pid, proc=process, timeout=15)


def test_kube_scheduler_reads_the_exported_configuration_and_reports_the_extender(tmp_path):
    exported = yaml.safe_load(scheduler_configuration(32766))
    with LocalCluster(tmp_path / "cluster", nodes=["node-1"], audit=False) as cluster:
        document = {**exported, "clientConnection": {**exported["clientConnection"],
                                                     "kubeconfig": str(cluster.workdir / "scheduler.kubeconfig")}}
        (tmp_path / "v1").mkdir()
        process, port, log = start_scheduler(cluster, document, tmp_path / "v1")
        try:
            deadline, seen = time.monotonic() + 60, None
            while seen is None:
                assert process.poll() is None, f"kube-scheduler exited ({process.returncode}):\n{log.read_text()[-3000:]}"
                try:
                    seen = configz(port)
                except OSError:
                    assert time.monotonic() < deadline, f"no /configz in 60 s:\n{log.read_text()[-3000:]}"
                    time.sleep(0.3)
        finally:
            stop(process)
        # /configz shows the configuration as kube-scheduler holds it (v1's field names; false ones omitted).
        assert seen["componentconfig"]["apiVersion"] == "kubescheduler.config.k8s.io/v1"
        (extender,) = configz_extenders(seen)
        assert extender["urlPrefix"] == extender_url(32766) and extender["filterVerb"] == FILTER_VERB
        assert extender["bindVerb"] == BIND_VERB
        assert extender["managedResources"] == [{"name": GCUSHARE_RESOURCE}]   # ignoredByScheduler false
        assert extender.get("ignorable", False) is False and extender["nodeCacheCapable"] is True

        # What earlier releases exported: this kube-scheduler refuses it at once, naming the version.
        (tmp_path / "v1beta1").mkdir()
        process, _, log = start_scheduler(cluster, {**document, "apiVersion": "kubescheduler.config.k8s.io/v1beta1"},
                                          tmp_path / "v1beta1")
        try:
            assert process.wait(timeout=60) != 0
        finally:
            stop(process)
        refused = log.read_text().replace('\\"', '"')  # klog quotes the error inside its own quotes
        assert 'no kind "KubeSchedulerConfiguration" is registered for version "kubescheduler.config.k8s.io/v1beta1"' in refused, refused


def test_configz_of_kubernetes_1_33_reads_as_v1():
    """kube-scheduler 1.33 serves its internal structure at /configz (the oldest-Kubernetes leg's), 1.37 the v1
    document: both read as v1's field names."""
    go_fields = {"componentconfig": {"Extenders": [{
        "URLPrefix": "http://x:1/gcushare", "FilterVerb": "filter", "BindVerb": "bind", "EnableHTTPS": False,
        "TLSConfig": None, "HTTPTimeout": 30000000000, "NodeCacheCapable": True, "Ignorable": False,
        "ManagedResources": [{"Name": GCUSHARE_RESOURCE, "IgnoredByScheduler": False}]}]}}
    assert configz_extenders(go_fields) == [{
        "urlPrefix": "http://x:1/gcushare", "filterVerb": "filter", "bindVerb": "bind", "httpTimeout": 30000000000,
        "nodeCacheCapable": True, "managedResources": [{"name": GCUSHARE_RESOURCE}]}]
    v1 = {"componentconfig": {"extenders": [{"urlPrefix": "http://x:1/gcushare", "enableHTTPS": True}]}}
    assert configz_extenders(v1) == [{"urlPrefix": "http://x:1/gcushare", "enableHTTPS": True}]
