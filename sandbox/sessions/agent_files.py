"""File operations of the session agent (runs INSIDE the sandbox, standard library only).

The host sends this file's source ahead of sandbox/sessions/agent.py's (AGENT_SOURCE), so inside
the sandbox these are plain globals of the agent; on the host the agent imports them from here.
Every path may have been prepared by the code in the session: nothing here follows a planted
symlink for writing, opens a FIFO, or reads more than asked.
"""

import errno
import hashlib
import io
import os
import stat
import tarfile


def read_regular(path, limit, shown):
    """A regular file's bytes, at most `limit` (ValueError past it or for anything else)."""
    # O_NONBLOCK: a FIFO planted at the path must not hang the agent
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", shown)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{shown} is not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{shown} is larger than {limit} bytes")
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"{shown} is larger than {limit} bytes")
    return b"".join(chunks)


def untar(dest, blob):
    """Extract regular files and directories of a tar under dest; return the file count."""
    os.makedirs(dest, exist_ok=True)
    count = 0
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        for member in tar:
            name = os.path.normpath(member.name)
            if name.startswith(("/", "..")) or name == ".":
                continue
            target = os.path.join(dest, name)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
            elif member.isfile():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                src = tar.extractfile(member)
                data = src.read() if src is not None else b""
                write_new(target, data, member.mode & 0o755 | 0o600)
                count += 1
    return count


def write_new(path, data, mode):
    """Create or replace a regular file. Whatever the session left at the path (a symlink, a
    FIFO, a socket) is removed first, never followed or opened."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        os.unlink(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path, flags, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def digest(path, limit):
    """sha256 hex of a regular file of at most `limit` bytes; None for anything else."""
    try:
        return hashlib.sha256(read_regular(path, limit, path)).hexdigest()
    except (OSError, ValueError):
        return None


def walk_files(root, suffix, skip):
    for dirpath, dirnames, filenames in os.walk(root):  # never follows a symlinked dir
        dirnames[:] = [d for d in dirnames if d not in skip]
        for name in filenames:
            if name.endswith(suffix):
                yield os.path.join(dirpath, name)


def copy_tree(src, dst):
    """The seed: src's tree into dst (which exists: a tmpfs the session owns), symlinks as
    symlinks, modes kept; the copies belong to the agent's uid, so the session can edit them."""
    import shutil

    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
