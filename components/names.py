"""Names shared by the components, the node code and the policy pack's second opinion.

Labels, extended resources and image defaults that several modules must agree on.
"""

GCU_PRESENT_LABEL = "enflame.com/gcu.present"  # every GCU agent's default node selector
NFD_PCI_LABEL = "feature.node.kubernetes.io/pci-1e36.present"  # NFD: an Enflame PCI device (vendor 1e36)
DEPLOY_LABEL_PREFIX = "enflame.com/gcu.deploy."  # + component key: "false" keeps that agent off a node
OPERANDS_LABEL = DEPLOY_LABEL_PREFIX + "operands"  # "false" keeps every GCU agent off a node
# On a NodePort Service: the workload it fronts, as namespace/name (see GcuComponent).
FRONTS_ANNOTATION = "enflame.com/gcu.fronts"
GCU_RESOURCE = "enflame.com/gcu"  # what the device plugin advertises and GCU pods request
GCUSHARE_RESOURCE = "enflame.com/gcu-memory"  # what the GCU-share plugin advertises

DEFAULT_REPOSITORY = "artifact.enflame.cn/enflame_docker_images/enflame"
DEFAULT_VERSION = "latest"
DEFAULT_PULL_POLICY = "IfNotPresent"
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
# A node agent's deploy label while the driver under it is replaced (its DaemonSet's node affinity excludes it).
PAUSED_FOR_DRIVER_UPGRADE = "paused-for-driver-upgrade"
