"""The one Kubernetes REST client of devtools: the `kubernetes` package (pinned in requirements.txt), called by path.

devtools reads and writes raw API paths (a node's status subresource, /readyz, objects it builds as plain dicts), so
it uses the client's generic request (`param_serialize` + `call_api`: its TLS, authentication and serialisation)
rather than the typed APIs. `LocalCluster.api` and the real nodes' `KubeApi` are this class.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

from kubernetes import client, config


class ApiError(RuntimeError):
    """A request the API server answered with an error status."""

    def __init__(self, status: int, body: str, method: str, path: str):
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class KubeApi:
    """JSON requests by path, with the credentials of a kubeconfig or of a bearer token and a CA file."""

    def __init__(self, configuration: client.Configuration):
        self.configuration = configuration
        self.client = client.ApiClient(configuration)

    @classmethod
    def from_kubeconfig(cls, path: Union[str, Path], context: Optional[str] = None) -> "KubeApi":
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(path), context=context, client_configuration=configuration)
        return cls(configuration)

    @classmethod
    def with_token(cls, server: str, token: str, ca_file: Union[str, Path]) -> "KubeApi":
        configuration = client.Configuration(host=server, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"})
        configuration.ssl_ca_cert = str(ca_file)
        return cls(configuration)

    @property
    def server(self) -> str:
        return self.configuration.host

    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 10.0,
                content_type: str = "application/json", raw: bool = False) -> Any:
        """The answer's JSON (its text with raw=True); ApiError for an error status."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.client.param_serialize(method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.client.call_api(*serialized[:4], _request_timeout=timeout)
        text = (response.read() or b"").decode(errors="replace")
        if response.status >= 300:
            raise ApiError(response.status, text, method, path)
        if raw:
            return text
        return json.loads(text) if text else None

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)

    def patch(self, path: str, body: Any, **kw: Any) -> Any:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json", **kw)

    def close(self) -> None:
        self.client.close()
