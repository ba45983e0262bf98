"""A repository shipped as a source archive (a PyPI sdist), unpacked on use into a cache dir.

    tree = unpack(Path("repos/toolz-1.2.0.tar.gz"), keep=("toolz/*.py", "LICENSE.txt"))

The archive's top directory is stripped; with `keep` (globs, `*` never crossing a `/`) only the
matching files are kept (`**/` spans folders; `!G` drops what G matches, the last matching glob deciding), matched on each path with a leading `src/` removed (a src/ layout is
flattened, as the shipped set's trees are). The tree is written once per content hash of the
archive and the globs under ~/.cache/gspo-agents/swe-repos/KEY/NAME (NAME: the archive's name
without its suffix), atomically: built in a temporary folder beside it and renamed into place, so
concurrent loaders never see half a tree. Only regular files are extracted (no links, devices,
absolute or `..` paths). The archives are trusted inputs (the instance file's own data).
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

__all__ = ["ARCHIVE_SUFFIXES", "cache_root", "is_archive", "trimmed", "unpack"]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar")
_unpacked: dict[tuple[object, ...], Path] = {}  # one hash of each archive per process


def cache_root() -> Path:
    return Path.home() / ".cache" / "gspo-agents" / "swe-repos"


def is_archive(path: Path) -> bool:
    return path.name.endswith(ARCHIVE_SUFFIXES)


def unpack(archive: Path, keep: tuple[str, ...] = (), *, root: Path | None = None) -> Path:
    """The archive's tree (see the module docstring), built on first use; returns its folder."""
    archive = Path(archive)
    if not archive.is_file():
        raise FileNotFoundError(f"source archive {archive} does not exist")
    stat = archive.stat()
    memo = (str(archive.resolve()), stat.st_mtime_ns, stat.st_size, keep, root)
    if memo in _unpacked and _unpacked[memo].is_dir():
        return _unpacked[memo]
    _unpacked[memo] = _unpack(archive, keep, root)
    return _unpacked[memo]


def _unpack(archive: Path, keep: tuple[str, ...], root: Path | None) -> Path:
    digest = hashlib.sha256(archive.read_bytes())
    digest.update("\0".join(keep).encode())
    name = next(archive.name[: -len(s)] for s in ARCHIVE_SUFFIXES if archive.name.endswith(s))
    base = (root or cache_root()) / digest.hexdigest()[:16]
    if (base / name).is_dir():
        return base / name
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=base.parent))
    try:
        count = _extract(archive, keep, tmp / name)
        if count == 0:
            raise ValueError(
                f"source archive {archive}: no file matches repo_files {list(keep)} (the globs "
                "are relative to the archive's top folder, with src/ removed)"
            )
        tmp.rename(base)
    except OSError:
        if not (base / name).is_dir():  # not a lost race: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return base / name


def _extract(archive: Path, keep: tuple[str, ...], dest: Path) -> int:
    dest.mkdir(parents=True)
    count = 0
    try:
        tar = tarfile.open(archive)
    except tarfile.TarError as exc:
        raise ValueError(f"source archive {archive} cannot be read: {exc}") from exc
    with tar:
        for member in tar:
            rel = _relative(member.name)
            if rel is None or not member.isfile():
                continue
            if keep:
                if rel.parts[0] == "src" and len(rel.parts) > 1:
                    rel = PurePosixPath(*rel.parts[1:])
                if not _kept(rel, keep):
                    continue
            target = dest.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file always has a body
            with source, target.open("wb") as out:
                shutil.copyfileobj(source, out)
            count += 1
    return count


def _relative(name: str) -> PurePosixPath | None:
    """The member's path below the archive's top folder; None for the top folder itself and for
    anything that would leave the tree."""
    parts = PurePosixPath(name).parts
    if len(parts) < 2 or name.startswith("/") or ".." in parts:
        return None
    return PurePosixPath(*parts[1:])


def _kept(rel: PurePosixPath, keep: tuple[str, ...]) -> bool:
    """The last glob that matches decides, as in .gitignore: `G` keeps, `!G` drops."""
    verdict = False
    for glob in keep:
        if _matches(rel, glob.removeprefix("!")):
            verdict = not glob.startswith("!")
    return verdict


def _matches(rel: PurePosixPath, pattern: str) -> bool:
    return _regex(pattern).fullmatch(rel.as_posix()) is not None


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex: `*` and `?` never cross a `/`; `**/` spans any number of folders."""
    out = []
    for part in re.split(r"(\*\*/|\*|\?)", pattern):
        out.append({"**/": "(?:.*/)?", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part)))
    return re.compile("".join(out))


def trimmed(sdist: Path, keep: tuple[str, ...], dest: Path) -> Path:
    """A deterministic .tar.xz of the sdist's files that match `keep` (top folder NAME kept, src/
    flattened): for projects whose whole sdist is too big to ship (Django, sympy)."""
    name = next(dest.name[: -len(s)] for s in ARCHIVE_SUFFIXES if dest.name.endswith(s))
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / name
        _extract(sdist, keep, tree)
        with tarfile.open(dest, "w:xz", preset=9, format=tarfile.GNU_FORMAT) as tar:
            for path in sorted(p for p in tree.rglob("*") if p.is_file()):
                info = tar.gettarinfo(path, f"{name}/{path.relative_to(tree).as_posix()}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                info.mode = 0o644
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
    return dest
