"""Fixtures of the hardening suite; the helpers live in hd_util."""

from __future__ import annotations

import os

import pytest
from hd_util import Dockerd, docker_answers, dockerd_pid, need


@pytest.fixture
def dockerd():
    need(os.geteuid() == 0, "restarting dockerd needs root")
    need(dockerd_pid() is not None and docker_answers(), "no running dockerd to restart")
    control = Dockerd()
    try:
        yield control
    finally:
        control.ensure_running()
