"""Names shared by the components, the node code and the policy pack's second opinion.

Labels, extended resources and image defaults that several modules must agree on, and how a
name becomes a label value (the node code labels its validation Jobs like the program's objects).
"""

import hashlib
import re

GCU_PRESENT_LABEL = "enflame.com/gcu.present"  # every GCU agent's default node selector
NFD_PCI_LABEL = "feature.node.kubernetes.io/pci-1e36.present"  # NFD: an Enflame PCI device (vendor 1e36)
# NFD's API (v0.14 on): a worker publishes a node's features as a NodeFeature object; the master then labels the node
# and lists the labels it manages in its feature-labels annotation.
NFD_NODE_FEATURES = ("nfd.k8s-sigs.io", "v1alpha1", "nodefeatures")
NFD_ANNOTATION_PREFIX = "nfd.node.kubernetes.io/"
NFD_NODE_NAME_LABEL = NFD_ANNOTATION_PREFIX + "node-name"   # on a NodeFeature: the node it describes
NFD_LABELS_ANNOTATION = NFD_ANNOTATION_PREFIX + "feature-labels"
NFD_LABEL_NS = "feature.node.kubernetes.io/"   # where NFD puts a label named without a namespace
DEPLOY_LABEL_PREFIX = "enflame.com/gcu.deploy."  # + component key: "false" keeps that agent off a node
DEFAULT_DRIVER_LABEL = "enflame.com/gcu.driver.present=true"  # a GCU node with its driver loaded (NFD sets it)
SELFCHECK = "/usr/local/bin/gcu-selfcheck"  # images/toolkit/gcu-selfcheck.sh: what a validation pod runs by default
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
# The driver pool (spec.driver.pools) whose DaemonSet runs on a node. Set by a pool's rollout once the node is drained and
# its old driver pod gone, never by a selector: relabelling a node must not swap its driver under a running job.
DRIVER_POOL_LABEL = "gcu-stack.enflame.com/driver-pool"
PART_OF_LABEL, PART_OF = "app.kubernetes.io/part-of", "gcu-stack"   # on every pod gcu-stack runs
REVISION_LABEL = "controller-revision-hash"   # a DaemonSet pod's revision, set by its controller

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX = 63
LABEL_HASH_LENGTH = 10


def is_label_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and bool(LABEL_VALUE.match(value))


def label_value(value: str) -> str:
    """`value` as a label value: itself when it is one (at most 63 characters), else derived.

    Object names may be up to 253 characters and contain dots, label values at most 63: a
    longer name becomes its first characters, '-' and 10 hex digits of its SHA-256, so two
    names never share a value. Every name that fits is used as it is.
    """
    if is_label_value(value):
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:LABEL_HASH_LENGTH]
    head = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in value)
    head = head[: LABEL_VALUE_MAX - LABEL_HASH_LENGTH - 1].strip("-_.")
    return f"{head}-{digest}" if head else digest
