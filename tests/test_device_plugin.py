"""The device plugin (components/catalog/device_plugin.py)."""

from harness import pod_spec


def test_device_plugin_mounts_the_kubelet_socket_dir_and_advertises_the_gcu_resource(seed_run):
    pod = pod_spec(seed_run.one("DaemonSet", "enflame-gcu-k8s-plugin"))
    paths = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert "/var/lib/kubelet/device-plugins" in paths
    assert "--resource-name=enflame.com/gcu" in pod["containers"][0]["args"]
