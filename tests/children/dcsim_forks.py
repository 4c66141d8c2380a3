"""A fork server for the documented commands: ``python -m dcsim`` without a fresh JAX import each.

``tests/test_docs.py`` runs every documented command through ``/bin/sh`` exactly as printed. The
``python`` on that shell's PATH is a small script: for ``python -m dcsim ...`` it hands its argv,
working folder, environment and standard streams (the descriptors themselves, over a Unix socket)
to this server, and exits with the command's exit code; anything else it runs with the real
interpreter. The server has imported what a command would import (JAX, Flax, pandas, optax and
dcsim from the tracked copy) without starting a JAX backend, and forks once a command: the fork
takes the streams, folder and environment, and runs ``dcsim`` as ``__main__`` with ``runpy``, as
``python -m`` does. A fork starts from a process that has only imported, so each command sees what
a fresh process sees, less about two seconds of imports. Commands run one at a time; a command
whose caller went away (its time limit passed) has its process group ended.

Run as ``python dcsim_forks.py SOCKET``; prints ``ready`` once it listens. ``python dcsim_forks.py
--client SOCKET ARGV...`` is the client the shell's ``python`` script runs.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import sys

_FDS = 3  # stdin, stdout, stderr
_MAX_MESSAGE = 1 << 20


def _send(sock: socket.socket, payload: dict, fds: list[int] = ()) -> None:  # type: ignore[assignment]
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([json.dumps(payload).encode()], ancillary)


def _receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(_MAX_MESSAGE, socket.CMSG_LEN(_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return (json.loads(data) if data else None), list(fds)


def client(path: str, argv: list[str]) -> int:
    """Run ``python ARGV`` (``-m dcsim ...``) in the server; its exit code."""
    env = {key: value for key, value in os.environ.items() if key != "DOCS_FORK_SOCKET"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(path)
        _send(sock, {"argv": argv, "cwd": os.getcwd(), "env": env}, [0, 1, 2])
        reply, _ = _receive(sock)
    code = 1 if reply is None else reply["code"]
    return 128 - code if code < 0 else code  # killed by a signal: as a shell reports it


def _child(request: dict, fds: list[int]) -> None:
    """In the fork: become ``python -m dcsim ARGV`` in the caller's folder, streams and environment."""
    code = 1
    measured = None
    try:
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams, left open)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        measured = _measure_fork()
        sys.argv = ["dcsim", *request["argv"][2:]]
        sys.path[0] = os.getcwd()  # as `python -m` puts the working folder first
        import runpy

        try:
            runpy.run_module("dcsim", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                print(done.code, file=sys.stderr)
                code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            if measured is not None:
                measured.stop()
                measured.save()
        finally:
            os._exit(code)


def _measure_fork():
    """Under coverage.py (the suite's coverage measurement), the fork keeps its own data file: the
    server's collector stops in the fork, and a new one, reading the same settings, starts."""
    try:
        import coverage
    except ImportError:
        return None
    current = coverage.Coverage.current()
    if current is None:
        return None
    current.stop()
    fresh = coverage.Coverage(data_suffix=True)
    fresh.start()
    return fresh


def _run_one(conn: socket.socket, request: dict, fds: list[int]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _send(conn, {"code": os.waitstatus_to_exitcode(status)})
            return
        readable, _, _ = select.select([conn], [], [], 0.05)
        if readable and not conn.recv(1, socket.MSG_PEEK):  # the caller went away
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return


def serve(path: str) -> None:
    # What the commands import anyway, without starting a backend (a fork after that is unsafe).
    import flax.linen  # noqa: F401
    import jax  # noqa: F401
    import numpy  # noqa: F401
    import optax  # noqa: F401
    import pandas  # noqa: F401

    import dcsim.cli
    import dcsim.model.count  # noqa: F401

    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind(path)
        listener.listen(8)
        print("ready", flush=True)
        while True:
            readable, _, _ = select.select([listener, sys.stdin], [], [])
            if sys.stdin in readable and not sys.stdin.readline():  # the test session closed our stdin
                return
            if listener in readable:
                conn, _ = listener.accept()
                with conn:
                    request, fds = _receive(conn)
                    if request is not None and len(fds) == _FDS:
                        _run_one(conn, request, fds)
                    else:
                        for fd in fds:
                            os.close(fd)


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        sys.exit(client(sys.argv[2], sys.argv[3:]))
    serve(sys.argv[1])
