"""The Kubernetes manifests in deploy/k8s/ hang together and match the service they deploy.

No cluster runs here, so this checks what `kubectl apply --dry-run=client` would need (kinds,
apiVersions, required fields) and what only this project knows: the container's arguments
parse with `python -m sandbox serve`'s own parser, the probes use the one path that needs no
token, the selectors match, egress is denied, resources are limited, and the pod gets time to
drain.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sandbox.cli import _parser
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
