"""scripts/setup.sh's sandbox step on machines that cannot run the sandbox: it says so, says what
will not work, and exits 0, so `bash scripts/setup.sh && python -m gspo_agents.train` reaches the
default run (which needs no sandbox).

The machine is simulated by PATH: a directory holding only the coreutils the scripts use, a fake
`docker` CLI that answers no daemon, and a fake `apt-get` (recording its arguments) that fails or
"installs" a fake `dockerd` that cannot start. The real docker and dockerd on this machine are
never on that PATH, so nothing here touches them; dockerd's log goes to a temp file.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("bash", "dirname", "cat", "chmod", "seq", "sleep", "tail", "nohup", "env", "id")


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def machine(tmp_path):
    """A bin dir with only the docker CLI (no daemon) and an apt-get that cannot install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        real = shutil.which(tool)
        assert real, f"{tool} is needed to run setup.sh"
        (bin_dir / tool).symlink_to(real)
    _script(bin_dir / "docker", 'echo "Cannot connect to the Docker daemon" >&2; exit 1\n')
    apt_log = tmp_path / "apt-get.args"
    _script(
        bin_dir / "apt-get",
        f'echo "$*" >> {apt_log}\n[ "$1" = update ] && exit 0\necho "E: cannot install" >&2; exit 100\n',
    )
    return bin_dir, apt_log


def run_setup(bin_dir: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "GSPO_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
        "GSPO_DOCKERD_WAIT_S": "2",
        **env,
    }
    return subprocess.run(
        [str(bin_dir / "bash"), str(ROOT / "scripts" / "setup.sh"), "--sandbox-only"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_reports_no_sandbox(proc: subprocess.CompletedProcess, why: str) -> None:
    assert proc.returncode == 0, proc.stderr
    assert f"the sandbox is NOT set up: {why}" in proc.stderr, proc.stderr
    assert "the default run (env=arithmetic)" in proc.stderr
    assert "env=codeforces and env=mathtool" in proc.stderr
    assert "setup done" in proc.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the install path runs only as root")
def test_docker_cli_without_daemon_installs_docker_io_and_goes_on_when_it_cannot(machine, tmp_path):
    bin_dir, apt_log = machine
    proc = run_setup(bin_dir, tmp_path)
    # the CLI alone did not hide the missing daemon: docker.io was asked for
    assert "docker.io" in apt_log.read_text().splitlines()[-1].split()
    assert "could not install" in proc.stderr and "docker.io" in proc.stderr
    assert_reports_no_sandbox(proc, ".ci/setup_sandbox.sh failed")


@pytest.mark.skipif(os.geteuid() != 0, reason="the install path runs only as root")
def test_a_dockerd_that_cannot_start_shows_its_log_and_setup_goes_on(machine, tmp_path):
    bin_dir, apt_log = machine
    # apt-get "installs" docker.io: a dockerd that fails as it would in an unprivileged container
    fake_dockerd = bin_dir / "dockerd"
    _script(
        bin_dir / "apt-get",
        f'echo "$*" >> {apt_log}\n'
        f"printf '#!/bin/bash\\necho \"failed to start daemon: operation not permitted\"; exit 1\\n'"
        f" > {fake_dockerd}; chmod +x {fake_dockerd}\n",
    )
    proc = run_setup(bin_dir, tmp_path)
    assert "starting dockerd" in proc.stdout
    assert "dockerd did not come up" in proc.stderr
    assert "failed to start daemon: operation not permitted" in proc.stderr
    assert_reports_no_sandbox(proc, ".ci/setup_sandbox.sh failed")


def test_not_root_says_what_will_not_work_and_exits_0(machine, tmp_path):
    bin_dir, apt_log = machine
    (bin_dir / "id").unlink()
    _script(bin_dir / "id", "echo 1000\n")
    proc = run_setup(bin_dir, tmp_path)
    assert not apt_log.exists()  # nothing attempted without root
    assert_reports_no_sandbox(proc, "not running as root")
