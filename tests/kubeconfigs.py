"""Kubeconfig files as operators have them: several clusters' contexts in one file, one of them current."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


def merged(path: Path, clusters: dict[str, str], current: str) -> Path:
    """Write to `path` one kubeconfig with a context per entry of `clusters` ({context name: admin kubeconfig file}),
    each context naming its own cluster and user, and `current` as the current context."""
    config: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [], "preferences": {}}
    for name, source in clusters.items():
        one = yaml.safe_load(Path(source).read_text())
        (context,) = [c for c in one["contexts"] if c["name"] == one["current-context"]]
        (cluster,) = [c for c in one["clusters"] if c["name"] == context["context"]["cluster"]]
        (user,) = [u for u in one["users"] if u["name"] == context["context"]["user"]]
        config["clusters"].append({"name": name, "cluster": cluster["cluster"]})
        config["users"].append({"name": name, "user": user["user"]})
        config["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    config["current-context"] = current
    path.write_text(json.dumps(config, indent=2))
    return path


def use_context(path: Path, name: str) -> None:
    """`kubectl config use-context name` on that file."""
    config = yaml.safe_load(path.read_text())
    config["current-context"] = name
    path.write_text(json.dumps(config, indent=2))
