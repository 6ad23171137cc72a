# Sourced by scripts/test.sh, test-extended.sh and test-oldest-kubernetes.sh (ROOT set): set up (cached), build the
# whole toolchain (the tests need both the local control plane and the Pulumi toolchain built from Go modules), sweep
# what killed runs left, and set PARALLEL, pytest's arguments for the workers.
"$ROOT/scripts/setup.sh"
eval "$("$ROOT/scripts/toolchain.sh" all)"
cd "$ROOT"
# What killed earlier runs left on this machine (a session's real nodes, etcd data in /dev/shm, dockerd mounts) goes
# first: nothing of this run is starting yet, so nothing is spared for its age (devtools/sweep.py).
.venv/bin/python -m devtools.sweep --min-age 0
# Test modules run side by side, each whole on one worker (most engine modules share one stack across their
# tests, in order): GCU_TEST_WORKERS, default 4; 0 runs them in this process. Most of an engine test's time is
# spent waiting for servers, so four workers pay off even on two CPUs. (Not --dist loadgroup: with pytest 9.2
# it no longer groups, pytest-dev/pytest-xdist#1386.)
workers="${GCU_TEST_WORKERS:-4}"
PARALLEL=()
if [ "$workers" != 0 ]; then PARALLEL=(-n "$workers" --dist loadfile); fi
