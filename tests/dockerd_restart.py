"""`systemctl restart docker` for a test dockerd: stop it and start it again on the same socket."""

import sys

from devtools.dockerd import Dockerd

if __name__ == "__main__":
    state_dir = sys.argv[1]
    daemon = Dockerd.from_state_dir(state_dir)
    short_dir = daemon.short_dir
    daemon.stop()
    Dockerd(state_dir, detach=True, short_dir=short_dir).start()
