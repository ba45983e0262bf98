"""A session's `socket_dir` (docker and bubblewrap, real engines): the one host directory a
session can be given, bound read-only at /gspo-host. Hostile code in the session cannot write
into it, replace the socket or leave anything there; the socket is the session uid's alone; a
second session (no socket_dir) does not see it; a directory holding anything but sockets and
regular files is refused before a sandbox starts (a symlink or a subdirectory would widen what
the session reaches)."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from pathlib import Path

import pytest
from session_util import pool, session_backend  # noqa: F401 - fixtures

from sandbox import SessionPool
from sandbox.sessions.backends.base import share_socket_dir


@pytest.fixture
async def socket_dir():
    """A fresh dir with an echo server on a unix socket; yields (dir, lines the server got)."""
    root = tempfile.mkdtemp(prefix="gspo-socktest-")
    got: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        got.append(line)
        writer.write(b"echo:" + line)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(echo, path=os.path.join(root, "s.sock"))
    Path(root, "note.txt").write_text("read me\n")
    try:
        yield root, got
    finally:
        server.close()
        await server.wait_closed()
        os.chmod(root, 0o700)
        for entry in Path(root).iterdir():
            entry.unlink()
        os.rmdir(root)


HOSTILE = r"""
cd /gspo-host
python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_UNIX); s.connect("/gspo-host/s.sock"); s.sendall(b"hi\n")
print(s.recv(64).decode().strip())
EOF
stat -c '%a %u %F' . s.sock note.txt
touch x 2>/dev/null && echo WROTE
rm -f s.sock 2>/dev/null; [ -S s.sock ] || echo REMOVED
mv note.txt n2 2>/dev/null && echo MOVED
chmod 777 s.sock 2>/dev/null && echo CHMODDED
ln -s /etc y 2>/dev/null && echo LINKED
id -u
"""


async def test_the_socket_dir_is_the_sessions_alone_and_read_only(
    pool: SessionPool,  # noqa: F811
    socket_dir,
) -> None:
    root, got = socket_dir
    async with pool.session(socket_dir=root) as ws, pool.session() as other:
        r = await ws.exec(HOSTILE)
        lines = r.stdout.split("\n")
        assert lines[0] == "echo:hi", r.render()
        uid = lines[-2]
        assert lines[1:4] == [
            f"500 {uid} directory",
            f"600 {uid} socket",
            f"400 {uid} regular file",
        ]
        for escaped in ("WROTE", "REMOVED", "MOVED", "CHMODDED", "LINKED"):
            assert escaped not in r.stdout, r.render()
        seen = await other.exec("ls -A /gspo-host")
        assert "No such file" in seen.stderr and not seen.stdout
    assert got == [b"hi\n"]
    assert sorted(p.name for p in Path(root).iterdir()) == ["note.txt", "s.sock"]


def test_a_socket_dir_with_a_link_or_a_subdirectory_is_refused(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "ok.sock"))
        (tmp_path / "etc").symlink_to("/etc")
        with pytest.raises(ValueError, match="'etc', neither a unix socket"):
            share_socket_dir(str(tmp_path), os.geteuid())
        (tmp_path / "etc").unlink()
        (tmp_path / "sub").mkdir()
        with pytest.raises(ValueError, match="'sub', neither"):
            share_socket_dir(str(tmp_path), os.geteuid())
    with pytest.raises(ValueError, match="is not a directory"):
        share_socket_dir(str(tmp_path / "ok.sock"), os.geteuid())
