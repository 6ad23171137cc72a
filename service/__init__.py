"""gcu-stack's HTTP service: gcu-upgrade-manager's API (`/gum/v1/...`) over the Pulumi Automation API.

Scripts written for gcu-upgrade-manager (seed 001) keep working: the same routes, the same envelope
(`{"operation", "result", "content" | "error"}`), the blueprints directory they drop files into. On top, what gum
never had: previews, operations with progress, one operation per stack at a time, an operations log, each stack's
update history, Prometheus metrics and an OpenAPI document. Every request needs a bearer token.

- `config`: the service's settings (`python -m service serve --help`);
- `gum`: the envelope and the errors every route answers with;
- `blueprints`: the one directory PUT and preview read, and a blueprint checked against its stack before use;
- `stacks`: the stacks themselves, through the Automation API (list, read, preview, up, destroy, history);
- `operations`: long-running changes, one per stack, their progress, kept across restarts;
- `oplog`, `metrics`: what was done, for people (JSON lines) and for Prometheus;
- `app`: the routes.
"""
