"""The Kubernetes manifests in deploy/k8s/ hang together and match the service they deploy.

No cluster runs here, so this checks what `kubectl apply --dry-run=client` would need (kinds,
apiVersions, required fields) and what only this project knows: the container's arguments
parse with `python -m sandbox serve`'s own parser, the probes use the one path that needs no
token, the selectors match, egress is denied, resources are limited, and the pod gets time to
drain.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sandbox.cli import _parser
from sandbox.isolation import runner_guard
from sandbox.service.auth import OPEN_PATHS, check_bind

K8S = Path(__file__).resolve().parents[1] / "deploy" / "k8s"
API = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
}


def manifests() -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["apiVersion"] == API[doc["kind"]], (path, doc["kind"])
            assert doc["metadata"]["name"], path
            found.setdefault(doc["kind"], []).append(doc)
    return found


def deployment() -> dict:
    (found,) = manifests()["Deployment"]
    return found


def test_every_kind_is_there_with_its_api_version() -> None:
    assert set(manifests()) == set(API)


def test_deployment_runs_serve_as_the_cli_parses_it() -> None:
    dep = deployment()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = _parser().parse_args(container["args"])
    assert args.command == "serve" and args.max_sessions > 0
    check_bind(args.host, "a-token-is-mounted")  # 0.0.0.0 is allowed only with a token
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    secret_dir = str(Path(args.token_file).parent)
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[secret_dir])
    assert volume["secret"]["secretName"]
    assert pod["terminationGracePeriodSeconds"] >= args.drain_timeout_s
    port = container["ports"][0]
    assert port["containerPort"] == args.port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in OPEN_PATHS


def test_resources_are_limited_and_the_pod_is_not_privileged() -> None:
    pod = deployment()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    resources = container["resources"]
    for key in ("cpu", "memory", "ephemeral-storage"):
        assert key in resources["limits"] and key in resources["requests"]
    security = container["securityContext"]
    assert not security.get("privileged", False)
    assert security["allowPrivilegeEscalation"] is False
    assert "add" not in security.get("capabilities", {})
    assert pod["hostUsers"] is False  # its root is an unprivileged uid on the node
    assert pod["automountServiceAccountToken"] is False


def test_network_policy_denies_all_egress_and_admits_only_clients() -> None:
    (policy,) = manifests()["NetworkPolicy"]
    labels = deployment()["spec"]["template"]["metadata"]["labels"]
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= labels.items()
    assert "Egress" in spec["policyTypes"] and spec["egress"] == []
    (rule,) = spec["ingress"]
    assert rule["from"] and all("podSelector" in peer for peer in rule["from"])
    assert [p["port"] for p in rule["ports"]] == [8080]


def test_services_select_the_pods_on_the_named_port() -> None:
    dep = deployment()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    port_names = {p["name"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    for service in manifests()["Service"]:
        assert service["spec"]["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names


# ---- issue 32: the pod's security context, pinned images, the seccomp profile, TLS ----------
DEPLOY = K8S.parent
DIGEST = re.compile(r"^[a-z0-9.\-]+(:\d+)?(/[a-z0-9._\-]+)+@sha256:[0-9a-f]{64}$")
# what bubblewrap inside the pod must be allowed: namespaces and mounts
BWRAP_NEEDS = {
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "fsopen", "fsconfig",
    "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr", "clone", "clone3",
}  # fmt: skip


def test_pod_runs_non_root_without_capabilities_under_the_projects_seccomp_profile() -> None:
    pod = deployment()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["runAsNonRoot"] is True and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    for where in (security, pod["securityContext"]):
        profile = where["seccompProfile"]
        assert profile["type"] in ("RuntimeDefault", "Localhost"), profile
        if profile["type"] == "Localhost":
            assert (K8S / "seccomp" / profile["localhostProfile"]).is_file()
    # the image drops root too, so the pod's runAsNonRoot check passes
    assert re.search(r"^USER [1-9]\d*", (DEPLOY / "service.Dockerfile").read_text(), re.M)


def test_images_are_pinned_by_digest() -> None:
    for doc in manifests()["Deployment"]:
        for container in doc["spec"]["template"]["spec"]["containers"]:
            assert DIGEST.match(container["image"]), container["image"]


def test_seccomp_profile_denies_what_judge_runs_deny_but_bubblewraps_namespaces() -> None:
    profile = json.loads((K8S / "seccomp" / "gspo-sandbox.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {
        name: rule["errnoRet"]
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ERRNO"
        for name in rule["names"]
    }
    want = {n: errno.EPERM for n in runner_guard.DENY_EPERM if n not in BWRAP_NEEDS}
    want |= {n: errno.ENOSYS for n in runner_guard.DENY_ENOSYS if n not in BWRAP_NEEDS}
    assert denied == want
    assert {"io_uring_setup", "bpf", "perf_event_open", "keyctl", "add_key"} <= set(denied)


def _haproxy(path: Path) -> str:
    return path.read_text()


def test_haproxy_times_out_slow_requests_and_offers_tls() -> None:
    for name in ("haproxy.cfg", "haproxy-tls.cfg"):
        cfg = _haproxy(DEPLOY / "haproxy" / name)
        assert re.search(r"^\s*timeout http-request \d+s$", cfg, re.M), name
        assert re.search(r"^\s*option http-buffer-request$", cfg, re.M), name
    tls = _haproxy(DEPLOY / "haproxy" / "haproxy-tls.cfg")
    assert re.search(r"^\s*bind .* ssl crt ", tls, re.M)
    assert "haproxy-tls.cfg" in (DEPLOY.parent / "docs" / "sandbox_fleet.md").read_text()


def test_tls_config_is_valid_for_haproxy(tmp_path: Path) -> None:
    if not (shutil.which("haproxy") and shutil.which("openssl")):
        if os.environ.get("CI", "").lower() == "true":
            raise AssertionError("haproxy and openssl are needed here (.ci installs them)")
        pytest.skip("haproxy or openssl missing")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    pem = tmp_path / "sandbox.pem"
    pem.write_bytes(cert.read_bytes() + key.read_bytes())
    env = {
        **os.environ,
        "GSPO_LB_BIND": "127.0.0.1:18443",  # -c only checks: nothing binds
        "GSPO_LB_CERT": str(pem),
        **{f"GSPO_SANDBOX_{i}": f"127.0.0.1:{i}" for i in (1, 2, 3)},
    }
    out = subprocess.run(
        ["haproxy", "-c", "-f", str(DEPLOY / "haproxy" / "haproxy-tls.cfg")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
