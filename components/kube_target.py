"""Which cluster a stack acts on, pinned: the kubeconfig and the context, both explicit.

Left to itself, every tool follows the kube context that is current when it runs, so a
`pulumi destroy` after `kubectl config use-context other` would act on the other cluster.
The program therefore resolves the ambient choice once, at each run, into an explicit
kubeconfig path and context name that the Kubernetes provider and the bundled providers
both receive (and the engine keeps in state, where `destroy` and `refresh` read them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

import yaml

DEFAULT_KUBECONFIG = "~/.kube/config"


def looks_like_content(kubeconfig: str) -> bool:
    """A kubeconfig given inline (YAML or JSON text) rather than as a path."""
    return "\n" in kubeconfig or kubeconfig.lstrip().startswith(("apiVersion", "{"))


def _load(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}  # the provider reports an unreadable kubeconfig with its own, clearer error


def _contexts(config: dict) -> set[str]:
    return {c.get("name") for c in config.get("contexts") or [] if isinstance(c, dict)}


def pin(kubeconfig: Optional[str], context: Optional[str], environ: Mapping[str, str] = os.environ) -> tuple[Optional[str], Optional[str]]:
    """(kubeconfig, context) with the ambient parts made explicit.

    kubeconfig: the setting (a path or inline content) or else the file KUBECONFIG or
    ~/.kube/config names; None only in a pod (in-cluster credentials). context: the
    setting or else that kubeconfig's current-context. With several files in KUBECONFIG,
    the pinned one is the first that defines the context (as kubectl merges them).
    """
    if kubeconfig and looks_like_content(kubeconfig):
        return kubeconfig, context or (yaml.safe_load(kubeconfig) or {}).get("current-context")
    if kubeconfig:
        paths = [Path(kubeconfig).expanduser()]
    else:
        paths = [Path(p).expanduser() for p in (environ.get("KUBECONFIG") or "").split(os.pathsep) if p]
        if not paths:
            default = Path(environ.get("HOME") or "~").expanduser() / ".kube" / "config"
            paths = [default] if default.exists() else []
    if not paths:
        return None, context
    configs = [(path, _load(path)) for path in paths]
    chosen = context or next((c.get("current-context") for _, c in configs if c.get("current-context")), None)
    pinned = next((path for path, config in configs if chosen in _contexts(config)), paths[0])
    return str(pinned.absolute()), chosen
