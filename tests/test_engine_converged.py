"""engine.up_converged, which every engine test's completed `pulumi up` goes through, fails on a perpetual diff and
names what would change, and passes a program that converges (a real Pulumi CLI, a two-resource project)."""

import textwrap

import pytest
from engine import small_project, toolchain_cli, up_converged
from pulumi import automation as auto

pytestmark = pytest.mark.timeout(600)

PROGRAM = textwrap.dedent('''
    import pulumi
    from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider


    class Stamp(ResourceProvider):
        """Converges unless told not to: then every diff says it changed (what a perpetual diff looks like)."""

        def create(self, props):
            return CreateResult("stamp", dict(props))

        def diff(self, _id, olds, news):
            return DiffResult(changes=bool(news["perpetual"]) or olds != news, replaces=[])

        def update(self, _id, olds, news):
            from pulumi.dynamic import UpdateResult
            return UpdateResult(dict(news))


    class StampResource(Resource):
        def __init__(self, name, perpetual, opts=None):
            super().__init__(Stamp(), name, {"perpetual": perpetual}, opts)


    StampResource("stamp", pulumi.Config().get_bool("perpetual") or False)
''')


@pytest.fixture
def stack(tmp_path):
    project, env = small_project(tmp_path, "converged", PROGRAM)
    workspace = auto.LocalWorkspace(work_dir=str(project), pulumi_home=str(tmp_path / "home"), env_vars=env,
                                    pulumi_command=toolchain_cli(env))
    stack = auto.Stack.create("converged", workspace)
    yield stack
    stack.destroy(on_output=lambda _: None)


def test_a_program_that_converges_passes_and_a_perpetual_diff_fails_naming_the_resource(stack):
    assert up_converged(stack).summary.resource_changes.get("create") == 2   # the stack and the stamp
    stack.set_config("converged:perpetual", auto.ConfigValue("true"))
    with pytest.raises(AssertionError, match=r"(?s)--expect-no-changes.*perpetual diff.*stamp"):
        up_converged(stack)
