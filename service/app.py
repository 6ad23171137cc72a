"""The routes: gum's (`/gum/v1/gr...`), and what gum never had (preview, operations, history, metrics)."""

from __future__ import annotations

import hmac
import json
import os
import time
from pathlib import Path as FilePath
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pulumi import automation as auto
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from components.catalog.upgrade_manager import UPGRADE_MANAGER
from service import blueprints
from service.config import ServiceConfig
from service.gum import GumError, envelope, failure, operation_of
from service.metrics import Metrics
from service.operations import Operation, Operations, command_error
from service.oplog import OpLog
from service.stacks import NAME, StackStore, type_chain

POLICIES = ("background", "foreground")
# A GcuResource's name in a path, documented in the OpenAPI document (checked by FastAPI, refused as gum would).
GrName = Annotated[str, Path(pattern=NAME.pattern, max_length=63, description="a GcuResource (stack) name")]


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    """Refuses a request body over `limit` bytes, by its Content-Length or as it streams in (chunked)."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            response = _answer(scope["method"], scope["path"], 413,
                               f"the request body is {int(length)} bytes; at most {self.limit} are read")
            return await response(scope, receive, send)
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise BodyTooLarge(f"the request body is over {self.limit} bytes; at most {self.limit} are read")
            return message

        await self.app(scope, limited, send)


def _answer(method: str, path: str, status: int, message: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(failure(operation_of(method, path), message, **extra), status_code=status, headers=headers)


async def json_body(request: Request, allowed: tuple[str, ...]) -> dict:
    """The body as JSON whatever its content type (`curl -d` sends a form type, as gum's calls do)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise GumError(400, "the body is not JSON: send an object, e.g. -d '{\"file\": \"gr.json\"}'") from None
    if not isinstance(data, dict):
        raise GumError(400, f"the body must be a JSON object with {' or '.join(allowed)}, not {type(data).__name__}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise GumError(400, f"unknown field(s) in the body: {', '.join(unknown)} (known: {', '.join(allowed)})")
    return data


def who(request: Request) -> str:
    client = request.client.host if request.client else "?"
    return f"{client} ({request.headers.get('user-agent', 'no user agent')})"


def body_schema(properties: dict, required: list[str]) -> dict:
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"requestBody": {"required": bool(required), "content": {
        "application/json": {"schema": schema}, "application/x-www-form-urlencoded": {"schema": schema}}}}


FILE_BODY = body_schema({"file": {"type": "string", "description": "a blueprint file in the blueprints directory"}}, ["file"])
DELETE_BODY = body_schema({"policy": {"type": "string", "enum": list(POLICIES)}}, [])
BEARER = {"security": [{"bearer": []}]}


def create_app(config: ServiceConfig, store: StackStore) -> FastAPI:
    app = FastAPI(
        title="gcu-stack service",
        description="gcu-upgrade-manager's API (`/gum/v1`) over gcu-stack's Pulumi stacks, with previews, progress, "
                    "history and metrics. Every route but /healthz needs `Authorization: Bearer <token>`.",
        version="1.0.0",
    )
    oplog = OpLog(config.oplog_dir)
    metrics = Metrics()

    def finished(op: Operation, seconds: float) -> None:
        result = "Success" if op.phase == "succeeded" else "Failed"
        metrics.operations.labels(op.operation, result).inc()
        metrics.duration.labels(op.operation).observe(seconds)
        metrics.running.dec()
        if op.driverRolledOut and op.phase == "succeeded":
            metrics.driver_reports((op.outputs or {}).get("driverUpgrade") or {}, op.driverRollouts)
        oplog.write("finished", operationId=op.id, operation=op.operation, name=op.stack, who=op.who, result=result,
                    seconds=round(seconds, 1), changes=op.summary, error=op.error)

    def run_lock(stack: str) -> FilePath:
        from stackops.locks import file_backend_root, project_name, run_lock_path

        root = file_backend_root(store.env.get("PULUMI_BACKEND_URL") or os.environ.get("PULUMI_BACKEND_URL", ""))
        return run_lock_path(root or config.state_dir, project_name(config.project_dir), stack)

    operations = Operations(config.state_dir / "service", run_lock, finished)
    app.state.operations = operations

    # Added first, so inside `account`: its refusals are counted and logged like any answer.
    app.add_middleware(BodyLimit, limit=config.max_body)

    @app.middleware("http")
    async def account(request: Request, call_next: Any) -> Response:
        started = time.monotonic()
        operation = operation_of(request.method, request.url.path)
        try:
            response = await call_next(request)
        except BodyTooLarge as error:
            response = _answer(request.method, request.url.path, 413, str(error))
        except Exception as error:  # noqa: BLE001 - every answer is an envelope, a crash too
            oplog.write("error", method=request.method, path=request.url.path, who=who(request),
                        error=f"{type(error).__name__}: {error}")
            response = _answer(request.method, request.url.path, 500,
                               f"internal error ({type(error).__name__}: {error}); see the service's log")
        metrics.requests.labels(operation, str(response.status_code)).inc()
        if request.url.path not in ("/healthz", "/metrics"):
            oplog.write("request", method=request.method, path=request.url.path, who=who(request),
                        status=response.status_code, seconds=round(time.monotonic() - started, 3))
        return response

    @app.exception_handler(GumError)
    async def gum_error(request: Request, error: GumError) -> JSONResponse:
        return _answer(request.method, request.url.path, error.status, error.message, **error.extra)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no route {request.method} {request.url.path} (see /docs)",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(error.status_code, str(error.detail))
        return _answer(request.method, request.url.path, error.status_code, message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = []
        for e in error.errors():
            if tuple(e.get("loc", ())) == ("path", "name"):
                problems.append(f"{e.get('input')!r} is not a GcuResource name (lower-case letters, digits and '-', at most 63)")
            else:
                problems.append(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}")
        return _answer(request.method, request.url.path, 400, "; ".join(problems) or "invalid request")

    def authorized(request: Request) -> None:
        if config.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise GumError(401, "no bearer token: send `Authorization: Bearer <token>` (curl -H 'Authorization: Bearer ...')")
        if not hmac.compare_digest(given.strip().encode(), config.token.encode()):
            raise GumError(401, "the bearer token is not this service's")

    api = APIRouter(dependencies=[Depends(authorized)])

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        return {"status": "ok"}

    @api.get("/gum/v1/gr", openapi_extra=BEARER)
    @api.get("/gum/v1/gr/", include_in_schema=False)
    def list_resources() -> dict:
        items = store.resources()
        return envelope("List", {"apiVersion": "topsops.enflame.com/v1", "kind": "GcuResourceList", "items": items})

    @api.get("/gum/v1/gr/{name}", openapi_extra=BEARER)
    def get_resource(name: GrName) -> dict:
        return envelope("Get", store.gcu_resource(name))

    @api.get("/gum/v1/gr/{name}/resource/{kind}", openapi_extra=BEARER)
    def get_component(name: GrName, kind: str) -> dict:
        return envelope("Get", store.live_object(name, kind))

    @api.get("/gum/v1/gr/{name}/history", openapi_extra=BEARER)
    def history(name: GrName) -> dict:
        return envelope("History", {"name": name, "updates": store.history(name)})

    async def checked_blueprint(name: str, request: Request, changing: bool) -> tuple[str, dict]:
        body = await json_body(request, ("file",))
        path = blueprints.locate(config.blueprints_dir, body.get("file"))

        def check() -> dict:
            stack = store.stack(name)
            current, secret_keys = store.config(stack)
            values = blueprints.check(blueprints.read(path), name, current, secret_keys, config.project_dir)
            if changing and name == config.own_stack:
                key = UPGRADE_MANAGER.key
                if (blueprints.spec_part(values, key, config.project_dir, secret_keys)
                        != blueprints.spec_part(current, key, store.paths_dir, secret_keys)):
                    raise GumError(409, f"{body['file']} changes spec.{key}, this service itself (it runs from stack "
                                        f"{name}): an update from here would replace the pod running it. Apply this "
                                        "blueprint with the CLI on the service's node (docs/service.md, In the "
                                        f"cluster), or PUT one that leaves spec.{key} as it is")
            return values

        return body["file"], await run_in_threadpool(check)

    @api.post("/gum/v1/gr/{name}/preview", openapi_extra={**FILE_BODY, **BEARER})
    async def preview(name: GrName, request: Request) -> dict:
        file, values = await checked_blueprint(name, request, changing=False)
        events: list[auto.EngineEvent] = []
        try:
            result = await run_in_threadpool(store.preview, name, values, events.append)
        except auto.CommandError as error:
            raise GumError(422, f"the preview of {file} failed: {command_error(error)}") from None
        oplog.write("preview", name=name, file=file, who=who(request), changes=result.change_summary)
        return envelope("Preview", {"file": file, **preview_content(result, events)})

    @api.put("/gum/v1/gr/{name}", openapi_extra={**FILE_BODY, **BEARER})
    async def upgrade(name: GrName, request: Request) -> dict:
        file, values = await checked_blueprint(name, request, changing=True)
        caller = who(request)

        def work(op: Operation) -> dict:
            ready_to_change(name)
            stack = store.stack(name)
            store.apply_config(stack, values)
            result = store.up(name, op.on_event, f"gcu-stack service: PUT {file} by {caller} (operation {op.id})")
            return {"summary": result.summary.resource_changes or {},
                    "outputs": {k: v.value for k, v in result.outputs.items()}}

        op = start(name, "Upgrade", {"file": file}, caller, work)
        return envelope("Upgrade", operationId=op.id, progress=f"/gum/v1/operations/{op.id}")

    @api.delete("/gum/v1/gr/{name}", openapi_extra={**DELETE_BODY, **BEARER})
    async def delete(name: GrName, request: Request) -> JSONResponse:
        body = await json_body(request, ("policy",))
        policy = body.get("policy", "background")
        if policy not in POLICIES:
            raise GumError(400, f"policy {policy!r}: one of background (answer at once), foreground (answer when gone)")
        await run_in_threadpool(store.deployed, name)
        # The stack that runs this service (in-cluster) keeps it, as gum outlived the GcuResource it deleted.
        kept = await run_in_threadpool(service_only, name) if name == config.own_stack else None
        caller = who(request)

        def work(op: Operation) -> dict:
            ready_to_change(name)
            message = f"gcu-stack service: DELETE by {caller} (operation {op.id})"
            if kept is None:
                result = store.destroy(name, op.on_event, message)
                return {"summary": result.summary.resource_changes or {}}
            return all_but_the_service(name, kept, op, message + ": everything but this service")

        op = start(name, "Delete", {"policy": policy}, caller, work)
        if policy == "foreground":
            await run_in_threadpool(operations.wait, op)
            if op.phase != "succeeded":
                return _answer("DELETE", request.url.path, 500, op.error or "the delete failed", operationId=op.id)
        return JSONResponse(envelope("Delete", operationId=op.id, progress=f"/gum/v1/operations/{op.id}"))

    @api.get("/gum/v1/operations", openapi_extra=BEARER)
    def list_operations(name: str | None = None) -> dict:
        return envelope("Operation", [o.public() for o in operations.recent(name)][:50])

    @api.get("/gum/v1/operations/{operation_id}", openapi_extra=BEARER)
    def get_operation(operation_id: str) -> dict:
        op = operations.get(operation_id)
        content = op.public()
        if op.phase == "running":
            content["driverNodes"] = store.driver_states(op.stack)
        return envelope("Operation", content)

    @api.get("/metrics", openapi_extra=BEARER)
    def prometheus() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def service_only(name: str) -> Optional[dict]:
        """The config of stack `name` deploying this service's part and nothing else (None: it does not run it)."""
        current, secret_keys = store.config(store.stack(name))
        return blueprints.keeping_only(current, UPGRADE_MANAGER.key, store.paths_dir, secret_keys)

    def all_but_the_service(name: str, values: dict, op: Operation, message: str) -> dict:
        """An up to `values` (only this service), after a preview shows it leaves the service's own resources be."""
        events: list[auto.EngineEvent] = []
        planned = preview_content(store.preview(name, values, events.append), events)
        touched = sorted(f"{c['op']} {c['urn']}" for c in planned["changes"] if disturbs_the_service(c["op"], c["urn"]))
        if touched:
            raise GumError(409, f"removing everything but this service would also {'; '.join(touched)}: nothing "
                                f"changed. Delete stack {name} with the CLI on the service's node (`pulumi destroy "
                                f"--stack {name}` where its Pulumi.{name}.yaml is)")
        store.apply_config(store.stack(name), values)
        result = store.up(name, op.on_event, message)
        return {"summary": result.summary.resource_changes or {}}

    def ready_to_change(name: str) -> None:
        """What a killed command left on the stack (a stale lock, pending operations) cleared, as the CLI does."""
        from stackops import recover

        backend = store.env.get("PULUMI_BACKEND_URL") or os.environ.get("PULUMI_BACKEND_URL", "")
        result = recover(config.project_dir, name, backend, config.state_dir, env={**os.environ, **store.env},
                         pulumi=(store.pulumi_path,))
        for line in result.cleared:
            oplog.write("recovered", name=name, message=line)
        if not result.ok:
            raise GumError(409, " ".join(result.blocked))

    def start(name: str, kind: str, request: dict, caller: str, work: Any) -> Operation:
        op = operations.start(name, kind, request, caller, work)
        metrics.running.inc()
        oplog.write("started", operationId=op.id, operation=kind, name=name, who=caller, request=request)
        return op

    app.include_router(api)

    def openapi() -> dict:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    return app


def disturbs_the_service(op: str, urn: str) -> bool:
    """Whether a planned step would restart or remove the service's pod: any change to its component's resources, or
    the loss of a namespace or of the Kubernetes provider (what its objects stand on)."""
    chain = type_chain(urn)
    if f"gcu:components:{UPGRADE_MANAGER.type_name}" in chain:
        return op not in ("same", "read")
    standing_on = chain[-1:] in (["kubernetes:core/v1:Namespace"], ["pulumi:providers:kubernetes"])
    return standing_on and op in ("delete", "replace", "create-replacement", "delete-replaced", "discard")


def preview_content(result: auto.PreviewResult, events: list[auto.EngineEvent]) -> dict:
    """What a preview would change, resource by resource, and what the program said (the driver's waves)."""
    changes, messages, violations = [], [], []
    for event in events:
        pre = event.resource_pre_event
        if pre and pre.metadata:
            op = str(getattr(pre.metadata.op, "value", pre.metadata.op)).lower()
            if op not in ("same", "read"):
                urn = pre.metadata.urn
                changes.append({"op": op, "type": pre.metadata.type, "name": urn.rsplit("::", 1)[-1], "urn": urn,
                                "diffs": pre.metadata.diffs or []})
        diagnostic = event.diagnostic_event
        if diagnostic and diagnostic.severity in ("info", "warning", "error") and diagnostic.message.strip():
            messages.append({"severity": diagnostic.severity, "urn": diagnostic.urn, "message": diagnostic.message.strip()})
        policy = event.policy_event
        if policy:
            violations.append({"policy": policy.policy_name, "level": policy.enforcement_level,
                               "urn": policy.resource_urn, "message": policy.message})
    summary = {str(getattr(k, "value", k)).lower(): v for k, v in (result.change_summary or {}).items()}
    return {"changeSummary": summary, "changes": changes, "messages": messages, "policyViolations": violations}
