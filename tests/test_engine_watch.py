"""components/providers/engine_watch.py: a dynamic provider whose `pulumi up` is SIGKILLed (the CLI alone) stops at once
instead of carrying on with nothing to record it. A real Pulumi CLI and its real Python dynamic provider process."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from engine import small_project
from realnode_fixtures import wait_until
from realservers import PROJECT_DIR

from components.providers.engine_watch import EXIT_ENGINE_GONE, engine_address, watch_engine
from devtools.realnode import _all_pids, _environ_has, _process_state  # the project's one reading of /proc/<pid>/stat

pytestmark = pytest.mark.timeout(600)


def test_the_engine_address_is_the_last_argument_that_is_not_a_flag():
    assert engine_address(["prog", "127.0.0.1:40123"]) == ("127.0.0.1", 40123)
    assert engine_address(["prog", "--logtostderr", "-v=9", "127.0.0.1:40123"]) == ("127.0.0.1", 40123)
    assert engine_address(["prog", "[::1]:40123"]) == ("::1", 40123)
    assert engine_address(["prog"]) is None
    assert engine_address(["prog", "tests/test_x.py"]) is None   # pytest's own arguments: no watch
    assert watch_engine() is False   # this process is not a dynamic provider


def test_a_watched_process_exits_once_its_engine_stops_answering_and_not_before():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    code = ("import time; from components.providers.engine_watch import watch_engine; "
            f"assert watch_engine(['provider', '127.0.0.1:{port}'], interval=0.2); time.sleep(60)")
    watched = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT_DIR, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)   # ten checks while the engine answers
        assert watched.poll() is None, watched.stderr.read()
        listener.close()
        assert watched.wait(timeout=20) == EXIT_ENGINE_GONE
        assert f"the Pulumi engine at 127.0.0.1:{port} is gone" in watched.stderr.read()
    finally:
        listener.close()
        watched.kill()
        watched.wait()


PROGRAM = textwrap.dedent('''
    import os
    import time

    import pulumi
    from pulumi.dynamic import CreateResult, Resource, ResourceProvider

    from components.providers.engine_watch import engine_watched


    def slow_create(self, props):
        """A long step (a driver rollout): its process id, then five minutes of work."""
        with open(props["pidFile"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(300)
        return CreateResult("slow", dict(props))


    class Watched(ResourceProvider):
        create = engine_watched(slow_create)


    class Unwatched(ResourceProvider):
        create = slow_create


    class Slow(Resource):
        def __init__(self, name, provider, pid_file, opts=None):
            super().__init__(provider, name, {"pidFile": pid_file}, opts)


    config = pulumi.Config()
    Slow("slow", Watched() if config.get_bool("watched") else Unwatched(), config.require("pidFile"))
''')


def _marked(marker: str) -> list[int]:
    return [pid for pid in _all_pids() if _environ_has(pid, marker)]


@pytest.fixture
def project(tmp_path):
    """A one-resource project whose resource takes five minutes to create, and a way to start `pulumi up` on it: every
    process of the run carries a marker in its environment, so whatever outlives the test is found and killed."""
    project, pulumi = small_project(tmp_path, "watched", PROGRAM)
    marker = f"GCU_ENGINE_WATCH_TEST={uuid.uuid4().hex}"
    env = {**os.environ, **pulumi, "PYTHONPATH": str(PROJECT_DIR), marker.split("=")[0]: marker.split("=")[1]}
    cli = str(Path(env["PATH"].split(":")[0]) / "pulumi")

    def up(watched: bool) -> tuple[subprocess.Popen, int]:
        """`pulumi up` started on a stack of its own (the killed one keeps its lock); (the CLI, the dynamic provider's
        pid) once the provider is in its long step."""
        stack, pid_file = f"watched-{str(watched).lower()}", tmp_path / f"provider-{watched}.pid"
        subprocess.run([cli, "stack", "init", stack], cwd=project, env=env, check=True, capture_output=True)
        for key, value in (("watched", str(watched).lower()), ("pidFile", str(pid_file))):
            subprocess.run([cli, "config", "set", "--stack", stack, key, value], cwd=project, env=env, check=True,
                           capture_output=True)
        run = subprocess.Popen([cli, "up", "--yes", "--skip-preview", "--stack", stack], cwd=project, env=env,
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), 120, what="the provider in its long step")
        return run, int(pid_file.read_text())

    yield up
    for pid in _marked(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_provider_whose_cli_is_killed_stops_and_an_unwatched_one_would_carry_on(project):
    run, provider = project(watched=False)
    os.kill(run.pid, signal.SIGKILL)   # the CLI alone: its plugins are in process groups of their own
    run.wait()
    time.sleep(8)   # more than the watch's three missed checks, a second apart
    assert _process_state(provider) not in ("", "Z"), "without the watch the provider outlives its CLI: this test can fail"
    os.kill(provider, signal.SIGKILL)

    run, provider = project(watched=True)
    assert _process_state(provider) not in ("", "Z")
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    wait_until(lambda: _process_state(provider) in ("", "Z"), 30, what=f"the provider (pid {provider}) to stop after its CLI was killed")
