"""Runs as `python -I -S sandbox_launch.py <limits json> -- <bwrap argv...>` (standard library only).

Applies resource limits, joins the server's cgroup where the machine lets us create one, and
execs bubblewrap with an EMPTY environment: bwrap's own environ is visible inside the sandbox
(/proc/1/environ), so nothing of the worker's environment may reach it.
"""

import json
import os
import resource
import sys


def join_cgroup(name: str, memory: int, pids: int) -> bool:
    root = "/sys/fs/cgroup"
    v2 = os.path.join(root, "cgroup.controllers")
    try:
        if os.path.exists(v2):
            path = os.path.join(root, "airlock", name)
            os.makedirs(path, exist_ok=True)
            for key, value in (("memory.max", memory), ("memory.swap.max", 0), ("pids.max", pids)):
                with open(os.path.join(path, key), "w") as f:
                    f.write(str(value))
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            return True
        for controller, key, value in (("memory", "memory.limit_in_bytes", memory), ("pids", "pids.max", pids)):
            path = os.path.join(root, controller, "airlock", name)
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, key), "w") as f:
                f.write(str(value))
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        return True
    except OSError:
        return False


def main() -> None:
    limits = json.loads(sys.argv[1])
    argv = sys.argv[sys.argv.index("--") + 1:]
    in_cgroup = join_cgroup(limits["name"], limits["memory"], limits["pids"])
    # With a cgroup the memory limit is enforced by the kernel's OOM killer; the address-space
    # rlimit is then only a backstop (runtimes such as node reserve more than they use).
    address_space = limits["memory"] * 4 if in_cgroup else limits["memory"]
    for which, value in ((resource.RLIMIT_AS, address_space), (resource.RLIMIT_CPU, limits["cpu"]),
                         (resource.RLIMIT_NOFILE, limits["nofile"]), (resource.RLIMIT_NPROC, limits["pids"]),
                         (resource.RLIMIT_FSIZE, limits["fsize"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(which, (value, value))
    os.execve(argv[0], argv, {})  # noqa: S606 (no shell on purpose)


if __name__ == "__main__":
    main()
