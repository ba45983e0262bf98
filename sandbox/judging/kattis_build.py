"""Output validators that are several programs' worth of files, built and run as Kattis does.

The problem package format (section "Programs"): a validator directory may hold POSIX shell
scripts `build` and `run`; `build`, if present, runs first with (a copy of) the directory as its
working directory, and `run` must exist afterwards; `run` is then invoked like a one-file
program. Without the scripts, the language decides: all C++ sources of the directory are
compiled and linked together (several translation units, each with its own statics; never
concatenated into one file). problemtools (run/buildrun.py) does the same.

Here the build runs once, in the sandbox (the package is data, its scripts untrusted code), and
its result is cached like a compiled program (the compile cache, memory and disk, keyed by the
files, the runner and the image recipe). What comes back is a tar of the built directory; the
validator then runs as a small Python launcher that unpacks it once per sandbox run and execs
`run input answer feedback_dir [flags]` with absolute paths, the team output on stdin.
benchmarks/kattis_validators.py measures what the launcher costs per test.
A package whose validator cannot be built is refused at load (PackageError with the build's
output), so no submission is ever judged SE for it.

Single-file validators (one .py, or one C++ source with its headers) keep the plain path in
sandbox.judging.kattis.validator_program: compiled through the compile cache, no launcher.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import io
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from sandbox.errors import BackendFailure
from sandbox.judging.compile_cache import RUNNER_DIGEST, Entry, shared_cache
from sandbox.types import Limits, Program, TestCase, Verdict

CPP_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++", ".C")
BUILD_LIMITS = Limits(
    time_s=120.0, memory_mb=2048, output_bytes=64 << 20, processes=64, wall_time_s=300.0
)
MAX_FILES_BYTES = 16 << 20

# Runs in the sandbox: unpack, build (script or C++ sources), check `run`, send the tree back.
_BUILDER = r"""import base64, io, os, subprocess, sys, tarfile
FILES = "{files}"
with tarfile.open(fileobj=io.BytesIO(base64.b64decode(FILES))) as t:
    t.extractall("prog")
os.chdir("prog")
def fail(why, output=b""):
    sys.stderr.write(why + "\n" + output.decode("utf-8", "replace")[-4000:])
    sys.exit(1)
def call(argv):
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return done.returncode, done.stdout
if os.path.exists("build"):
    os.chmod("build", 0o755)
    code, out = call(["./build"])
    if code != 0:
        fail(f"the build script exited with {{code}}", out)
elif not os.path.exists("run"):
    sources = sorted(f for f in os.listdir(".") if f.endswith({cpp!r}))
    if not sources:
        fail("no build/run scripts and no C++ sources to compile")
    code, out = call(["g++", "-std=gnu++17", "-O2", "-pipe", "-I.", "-o", "validator", *sources])
    if code != 0:
        fail(f"g++ exited with {{code}} compiling {{' '.join(sources)}}", out)
    with open("run", "w") as fh:
        fh.write('#!/bin/sh\nexec "$(dirname "$0")/validator" "$@"\n')
if not os.path.isfile("run"):
    fail("the build did not leave a `run` file")
os.chmod("run", 0o755)
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as t:
    t.add(".", arcname=".")
sys.stdout.write(base64.b64encode(buf.getvalue()).decode())
"""

# Runs in the sandbox per test. The built files are unpacked once per run, beside main.py (the
# run's scratch dir outlives its tests; a test's own dir does not), then `run` replaces this
# process (exec: no waiting Python in between). Only cheap modules: the interpreter's start-up
# is most of the cost.
_LAUNCHER = r"""import base64, os, sys, zlib
FILES = {files}
def unpack(home):
    os.makedirs(home, exist_ok=True)
    for name, (mode, data) in FILES.items():
        path = os.path.join(home, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(zlib.decompress(base64.b64decode(data)))
        os.chmod(path, mode)
    open(os.path.join(home, ".ready"), "w").close()
home = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".validator")
if not os.path.exists(os.path.join(home, ".ready")):
    try:
        unpack(home)
    except OSError:  # the scratch dir is not ours to write: unpack into the test's dir
        home = os.path.abspath(".validator")
        unpack(home)
inp, ans, feedback = (os.path.abspath(a) for a in sys.argv[1:4])
run = os.path.join(home, "run")
os.execv(run, [run, inp, ans, feedback + "/", *sys.argv[4:]])
"""


class BuildError(ValueError):
    """The validator directory could not be built; the message has the build's output."""


def needs_build(directory: Path) -> bool:
    """Kattis builds this one: build/run scripts, or C++ split over several sources."""
    if not directory.is_dir():
        return False
    if (directory / "build").exists() or (directory / "run").exists():
        return True
    return sum(1 for f in directory.iterdir() if f.suffix in CPP_SUFFIXES) > 1


def pack(directory: Path) -> bytes:
    """The directory's files as a deterministic tar.gz (names sorted, times zeroed)."""
    buf = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            data = path.read_bytes()
            total += len(data)
            if total > MAX_FILES_BYTES:
                raise BuildError(f"{directory}: over {MAX_FILES_BYTES >> 20} MiB of files")
            info = tarfile.TarInfo(str(path.relative_to(directory)))
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def builder_program(directory: Path) -> Program:
    files = base64.b64encode(pack(directory)).decode()
    return Program("python", _BUILDER.format(files=files, cpp=CPP_SUFFIXES))


def launcher(built: bytes) -> Program:
    """The per-test Program: the built tree (a tar.gz from the builder) as compressed files."""
    files: dict[str, tuple[int, str]] = {}
    with tarfile.open(fileobj=io.BytesIO(built)) as tar:
        for member in tar.getmembers():
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is None:
                continue
            name = str(PurePosixPath(member.name))
            if name.startswith(("/", "..")):
                raise BuildError(f"the build left a file outside its directory: {member.name!r}")
            data = zlib.compress(handle.read(), 6)
            files[name] = (member.mode & 0o777, base64.b64encode(data).decode())
    return Program("python", _LAUNCHER.format(files=repr(files)))


def _cache_key(builder: Program) -> str:
    from sandbox.isolation.image import recipe_hash

    digest = hashlib.sha256()
    for part in ("kattis-build", RUNNER_DIGEST, recipe_hash(), builder.source):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


async def build(directory: Path, sandbox: object) -> Program:
    """Build in `sandbox` (a sandbox.Sandbox) once; the launcher Program, or BuildError."""
    builder = builder_program(directory)
    key = _cache_key(builder)
    cache = shared_cache()
    entry = cache.get(key)
    if entry is None:
        result = await sandbox.run(builder, [TestCase("")], BUILD_LIMITS)  # type: ignore[attr-defined]
        test = result.tests[0] if result.tests else None
        if result.verdict is Verdict.SE:
            raise BackendFailure(  # infrastructure, not the package: never a PackageError
                f"{directory}: sandbox error while building the validator: {test and test.message}"
            )
        if result.verdict is not Verdict.OK or test is None:
            why = (test.stderr or test.message) if test else result.compile_output
            raise BuildError(f"{directory}: the output validator cannot be built: {why.strip()}")
        entry = Entry(base64.b64decode(test.stdout))
        cache.put(key, entry)
    assert entry.binary is not None
    return launcher(entry.binary)


def build_sync(directory: Path, backend: str = "auto") -> Program:
    """`build` with a short-lived sandbox of its own (a cache hit needs none); callable from
    synchronous code, also from inside a running event loop (it then uses a worker thread)."""
    builder = builder_program(directory)
    entry = shared_cache().get(_cache_key(builder))
    if entry is not None and entry.binary is not None:
        return launcher(entry.binary)

    async def go() -> Program:
        from sandbox.core import Sandbox

        async with Sandbox.create(backend, max_concurrency=1) as sandbox:  # type: ignore[arg-type]
            return await build(directory, sandbox)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(go())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()
