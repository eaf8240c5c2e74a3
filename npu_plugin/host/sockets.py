"""Unix-socket gRPC servers with 0600 sockets in 0750 directories."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path

import grpc

from npu_plugin.errors import ConfigError
from npu_plugin.host.atomic import make_directories


def prepare_socket_dir(directory: Path) -> None:
    """Create the directory and its missing parents 0750, as the kubelet creates its own; an
    existing directory (the kubelet's) keeps its mode."""
    make_directories(directory, 0o750)


MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes including the terminating NUL


async def start_unix_server(path: Path, register: Callable[[grpc.aio.Server], None]) -> grpc.aio.Server:
    """Bind a fresh socket at `path` (a stale file is removed) readable by its owner only."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"socket path {path} is {len(os.fsencode(path))} bytes; Unix sockets allow "
            f"{MAX_SOCKET_PATH}: choose a shorter directory"
        )
    if not os.access(path.parent, os.W_OK | os.X_OK):
        # gRPC would report only "Failed to bind to address"; name the directory and the reason
        # instead.
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path.parent))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = grpc.aio.server()
    register(server)
    # The umask makes the socket 0600 from its first instant; chmod afterwards would leave a window.
    previous = os.umask(0o177)
    try:
        server.add_insecure_port(f"unix://{path}")
        await server.start()
    finally:
        os.umask(previous)
    # A kubelet starting up deletes every socket in its directory, ours too, possibly right after
    # the bind: the owner notices the deletion and binds again, so a socket already gone is not an
    # error here.
    with contextlib.suppress(FileNotFoundError):
        os.chmod(path, 0o600)
    return server


async def stop_unix_server(server: grpc.aio.Server, path: Path, grace: float | None = None) -> None:
    await server.stop(grace)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
