"""The compile cache's own rules (pure: no sandbox): keys, size bounds, the shared directory,
and which runner outcomes are cached."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from sandbox.judging.compile_cache import CompileCache, Entry, prepare, remember
from sandbox.types import Program

CPP = Program("cpp", "int main(){}")


def test_the_key_covers_language_source_and_image():
    key = CompileCache.key(CPP, "docker:img1")
    assert key == CompileCache.key(Program("cpp", "int main(){}"), "docker:img1")
    assert key != CompileCache.key(CPP, "docker:img2")
    assert key != CompileCache.key(Program("cpp", "int main(){ }"), "docker:img1")
    assert key != CompileCache.key(Program("python", "int main(){}"), "docker:img1")


def test_memory_is_bounded_least_recently_used_first():
    cache = CompileCache(max_bytes=10)
    cache.put("a", Entry(b"1234"))
    cache.put("b", Entry(b"1234"))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", Entry(b"1234"))  # 12 bytes > 10: evicts b
    assert cache.get("b") is None and cache.get("a") and cache.get("c")
    cache.put("huge", Entry(b"x" * 11))  # larger than the whole cache: not kept
    assert cache.get("huge") is None
    assert (cache.hits, cache.misses) == (3, 2)


def test_a_directory_shares_entries_between_caches_and_is_pruned(tmp_path: Path):
    first = CompileCache(directory=tmp_path / "cc", disk_max_bytes=25)
    first.put("bin", Entry(b"ELF-ish"))
    first.put("err", Entry(None, "main.cpp:1: error"))
    second = CompileCache(directory=tmp_path / "cc")  # another process, same directory
    assert second.get("err") == Entry(None, "main.cpp:1: error")
    assert (tmp_path / "cc").stat().st_mode & 0o777 == 0o700
    sizes = sum(p.stat().st_size for p in (tmp_path / "cc").iterdir())
    assert sizes <= 25  # 7 + 20 bytes written: the older entry was pruned
    assert second.get("bin") is None


def _out(ok: bool, output: str = "", binary: str | None = None, finished: bool = True):
    return SimpleNamespace(compile_ok=ok, compile_output=output, binary=binary, finished=finished)


def test_only_real_compile_outcomes_are_remembered():
    cache = CompileCache()
    request: dict = {}
    assert prepare(cache, CPP, "img", request) is None and request["return_binary"] > 0
    remember(cache, CPP, "img", request, _out(False, "compiler: CPU time limit exceeded"))
    remember(cache, CPP, "img", request, _out(False, ""))  # killed by a signal: says nothing
    remember(cache, CPP, "img", request, _out(False, "error", finished=False))  # runner died
    assert cache.get(CompileCache.key(CPP, "img")) is None
    remember(cache, CPP, "img", request, _out(True, binary="RUxG"))  # base64 of b"ELF"
    again: dict = {}
    assert prepare(cache, CPP, "img", again) is None and again["binary"] == "RUxG"
    python: dict = {}
    assert prepare(cache, Program("python", "x"), "img", python) is None and not python
    broken = Program("cpp", "int main( {")
    request = {}
    prepare(cache, broken, "img", request)
    remember(cache, broken, "img", request, _out(False, "main.cpp:1: error: expected"))
    assert prepare(cache, broken, "img", {}) == Entry(None, "main.cpp:1: error: expected")
