"""RULE: a cloud is one folder and a fabric is one folder. A new cloud (a copy of the smallest cloud, renamed) and a
new fabric (a copy of one, renamed and bound to it) are planned, guarded, booted and listed by every command, and
held to the contract tests, with no file of goldenenv outside their two folders changed.

The package is copied to a scratch tree, as a checkout holds it (goldenenv/ with templates/, images/, stacks/,
examples/ and tests/ beside it). Inside the copy only, goldenenv/clouds/alicloud/ becomes goldenenv/clouds/acmecloud/
and goldenenv/fabrics/erdma/ becomes goldenenv/fabrics/acmerdma/, each renamed inside its own folder as someone
starting a cloud from Alibaba's would rename it (its module path, CLOUD, its component type tokens, the fabric its
GPU types name in its catalog rows; the provider and its resource types stay: it is the same provider). Beside them
the copy gets what a cloud ships for its users: an example stack (from Alibaba's, with its cloud changed) and the
image lock of its fabric. Then goldenenv runs from the copy, in a project made by `goldenenv init`, the way a user
runs it: as commands, in their own processes.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("goldenenv", "templates", "images", "examples", "stacks", "tests", "Pulumi.yaml", "pyproject.toml")
"""What the copy takes from the checkout: the package and the folders it ships beside it (project.packaged), the
tests (the contract tests run from the copy) and the files that make the copy a project and a pytest root."""
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.published.yaml", "published.yaml", "snapshots",
                                    ".pytest_cache", "_data")

FROM_CLOUD, CLOUD = "alicloud", "acmecloud"
FROM_FABRIC, FABRIC = "erdma", "acmerdma"
FROM_STACK, STACK = "alicloud-ebmgn8v-2node", "acmecloud-2node"
FROM_LOCK, LOCK = "alicloud-h100", "acme-h100"
TYPE = "ecs.ebmgn8v.48xlarge"
"""The GPU type of the new cloud's stack; the new cloud's catalog lists it, as Alibaba's does."""
GOLDEN_REF = "registry.example.com/team/golden@sha256:" + "ab" * 32
"""A pushed golden image, as `up` gives the program."""

CONTRACTS = {
    "cloud": (), "user_data": (), "zone_hint": (), "head_recovery": (), "pull_grants": (), "least_privilege": (),
    "hardening": (), "teardown": (), "cost_gate": (), "fabric_host": (), "host_layer": (), "image_push": (),
    "bucket_services": (), "local_nvme": (), "spot_return": (), "stop_chain": (), "units_verify": (),
    "stop_faults": (), "stop_paths": (), "stop_alerts": (),
    "node_access": ("test_every_cloud_says_how_its_users_log_in",
                    "test_validate_and_run_log_in_as_the_clouds_login_and_reach_the_container",
                    "test_the_queue_commands_reach_the_head_as_the_clouds_login",
                    "test_with_a_key_every_host_takes_the_keys_user"),
    "tags": ("test_the_shipped_stacks_tags_pass_their_clouds_rule",
             "test_a_key_and_a_value_over_the_clouds_length_are_refused_at_their_key",
             "test_a_reserved_prefix_is_refused_in_a_key_and_where_the_cloud_says_in_a_value"),
}
"""The contract rules (tests/unit/test_contract_<name>.py, all its tests or those named) that judge a cloud by what
its folder declares; where a rule fakes a provider's API or grants (the stop functions' fakes, tests/unit/stopfakes/),
by the fakes of the provider it builds on, driving the cloud's own code. Left out, and failing for a new cloud until
it adds its row, each naming the table and the file: the literal anchors from a cloud's own pages
(test_contract_node_access's KEY_USERS, test_contract_tags' ANCHORS)."""
REGISTRY_RULES = ("test_cloud_imports", "test_own_cluster", "test_shared_modules", "test_template_folders")
"""Rules of shared code parametrized over the cloud registry (tests/unit/<name>.py), whose cases the new cloud's name
selects."""


def contract_tests() -> list[str]:
    return [f"tests/unit/test_contract_{name}.py" + (f"::{test}" if test else "")
            for name, tests in CONTRACTS.items() for test in tests or ("",)] + [
        f"tests/unit/{name}.py" for name in REGISTRY_RULES]


@dataclass(frozen=True)
class Tree:
    root: Path
    """The copy: goldenenv/ and the folders shipped beside it."""
    project: Path
    """A project made by the copy's `goldenenv init`, holding the new cloud's stack."""
    env: dict[str, str]
    before: dict[str, str]
    """Every file of the copy outside the two new folders, by path, with its hash before goldenenv ran."""


# ---------------------------------------------------------------- renaming a copied folder inside itself


def replace_in(folder: Path, suffixes: tuple[str, ...], edit: Callable[[str], str]) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in suffixes:
            path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")


def own_template_names(folder: Path, old: str, new: str) -> dict[str, str]:
    """Gives each template of the folder a name of its own, since two folders may not ship one name (render's
    TemplateClash): the old owner's name in it becomes the new one's (munge-key-alicloud.sh.j2 ->
    munge-key-acmecloud.sh.j2), else the new name is added to it (cpfs-mount.sh.j2 -> cpfs-mount-acmecloud.sh.j2).
    Returns old file name without .j2 -> new, the words code names templates by."""
    renamed = {}
    for path in sorted((folder / "templates").rglob("*.j2")) if (folder / "templates").is_dir() else []:
        stem = path.name.removesuffix(".j2")
        first, dot, rest = stem.partition(".")
        target = stem.replace(old, new) if old in stem else f"{first}-{new}{dot}{rest}"
        path.rename(path.with_name(target + ".j2"))
        renamed[stem] = target
    return renamed


def words_of(renamed: dict[str, str]) -> Callable[[str], str]:
    """Replaces each old template name (with or without .sh / .service / .j2) where the folder's code or templates
    write it, never inside a longer word."""
    if not renamed:
        return lambda text: text
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(k) for k in sorted(renamed, key=len, reverse=True))
                         + r")(?![\w-])")
    return lambda text: pattern.sub(lambda m: renamed[m.group(1)], text)


def copy_cloud(clouds: Path) -> None:
    folder = clouds / CLOUD
    shutil.copytree(clouds / FROM_CLOUD, folder, ignore=NOT_COPIED)
    renamed = own_template_names(folder, FROM_CLOUD, CLOUD)
    logins = {stem.removeprefix("registry-login-"): new.removeprefix("registry-login-")
              for stem, new in renamed.items() if stem.startswith("registry-login-")}
    templates = words_of(renamed)

    def rename(text: str) -> str:
        text = text.replace(f"goldenenv.clouds.{FROM_CLOUD}", f"goldenenv.clouds.{CLOUD}")
        text = text.replace(f"goldenenv/clouds/{FROM_CLOUD}", f"goldenenv/clouds/{CLOUD}")
        text = text.replace(f"goldenenv:{FROM_CLOUD}:", f"goldenenv:{CLOUD}:")
        text = text.replace(f'CLOUD = "{FROM_CLOUD}"', f'CLOUD = "{CLOUD}"')
        text = text.replace(f'"{FROM_FABRIC}"', f'"{FABRIC}"')
        for old, new in logins.items():
            text = text.replace(f'registry_login = "{old}"', f'registry_login = "{new}"')
        return templates(text)

    replace_in(folder, (".py", ".j2"), rename)
    borrowed = [p.name for p in folder.rglob("*.py") if f"goldenenv.clouds.{FROM_CLOUD}" in p.read_text()]
    assert not borrowed, f"the copy would still import {FROM_CLOUD}'s modules: {borrowed}"
    types = folder / "catalog" / "instance_types.csv"
    rows = list(csv.DictReader(io.StringIO(types.read_text(encoding="utf-8"))))
    assert any(r["rdma"] == FROM_FABRIC for r in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({**r, "rdma": FABRIC if r["rdma"] == FROM_FABRIC else r["rdma"]} for r in rows)
    types.write_text(out.getvalue(), encoding="utf-8")


def fabric_record(source: str) -> ast.Call:
    """The `Fabric(...)` call of a fabric folder's __init__.py (goldenenv.fabrics.model.Fabric)."""
    return next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id == "Fabric")


def replace_arguments(source: str, call: ast.Call, values: dict[int, str]) -> str:
    """The source with the call's positional arguments at those indexes replaced by string literals."""
    lines = source.splitlines(keepends=True)
    starts = [sum(len(line.encode()) for line in lines[:i]) for i in range(len(lines))]
    data = source.encode()
    for index in sorted(values, reverse=True):
        arg = call.args[index]
        begin, end = starts[arg.lineno - 1] + arg.col_offset, starts[arg.end_lineno - 1] + arg.end_col_offset
        data = data[:begin] + json.dumps(values[index]).encode() + data[end:]
    return data.decode()


def offered_names(source: str) -> list[str]:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return []


def evidence_names(source: str) -> list[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EVIDENCE" for t in node.targets):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    return []


def own_names(source: str, names: list[str]) -> str:
    """Each name prefixed with the new fabric's (ERDMA_HOST_IMAGE -> ACME_ERDMA_HOST_IMAGE, Erdma -> AcmeErdma)."""
    for name in names:
        own = ("ACME_" if name.isupper() else "Acme") + name
        source = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", own, source)
    return source


def last_order(source: str) -> str:
    return re.sub(r"^ORDER = \d+", "ORDER = 999", source, count=1, flags=re.M)


def copy_fabric(fabrics: Path) -> None:
    """The fabric's record (goldenenv.fabrics.model.Fabric: name, label, cloud, image layer, lock section)
    names the new fabric and cloud; the names it offers through goldenenv.fabrics and its health judge's evidence
    take a prefix (each must be one fabric's); it is listed last. The hardware it drives (the erdma kernel module,
    its devices, the health rule counting them) stays: it is the same NIC."""
    folder = fabrics / FABRIC
    shutil.copytree(fabrics / FROM_FABRIC, folder, ignore=NOT_COPIED)
    renamed = own_template_names(folder, FROM_FABRIC, FABRIC)
    replace_in(folder, (".j2",), words_of(renamed))
    init = folder / "__init__.py"
    source = init.read_text(encoding="utf-8")
    record = fabric_record(source)
    layer = ast.literal_eval(record.args[3])
    source = replace_arguments(source, record, {0: FABRIC, 1: "ACME RDMA", 2: CLOUD, 3: words_of(renamed)(layer),
                                                4: FABRIC})
    source = words_of(renamed)(last_order(own_names(source, offered_names(source))))
    init.write_text(source, encoding="utf-8")
    health = folder / "health.py"
    if health.is_file():
        source = health.read_text(encoding="utf-8")
        source = own_names(source, offered_names(source))
        for name in evidence_names(source):
            own = name.replace(FROM_FABRIC, FABRIC) if FROM_FABRIC in name else f"{FABRIC}_{name}"
            source = source.replace(f'"{name}"', f'"{own}"')
        health.write_text(last_order(source), encoding="utf-8")


def ship_stack_and_lock(root: Path) -> None:
    """What the new cloud ships for its users: an example stack and the image lock of its fabric."""
    stack = (root / "stacks" / f"Pulumi.{FROM_STACK}.yaml").read_text(encoding="utf-8")
    new = stack.replace(f"goldenenv:cloud: {FROM_CLOUD}", f"goldenenv:cloud: {CLOUD}").replace(
        f"lock: {FROM_LOCK}", f"lock: {LOCK}")
    assert new.count(CLOUD) == 1 and new.count(LOCK) == 1
    (root / "stacks" / f"Pulumi.{STACK}.yaml").write_text(new, encoding="utf-8")
    lock = yaml.safe_load((root / "images" / FROM_LOCK / "lock.yaml").read_text(encoding="utf-8"))
    lock.update(name=LOCK, fabric=FABRIC, description="H100-class GPUs on ACME RDMA")
    lock[FABRIC] = lock.pop(FROM_FABRIC)
    (root / "images" / LOCK).mkdir()
    (root / "images" / LOCK / "lock.yaml").write_text(yaml.safe_dump(lock, sort_keys=False), encoding="utf-8")


def hashes(root: Path) -> dict[str, str]:
    own = (f"goldenenv/clouds/{CLOUD}/", f"goldenenv/fabrics/{FABRIC}/")
    found = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and not relative.startswith(own):
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def git_status() -> set[str]:
    """The checkout's entries that differ from its last commit, ignored folders included (collapsed)."""
    return set(subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.splitlines())


WORDS = (CLOUD, FABRIC, LOCK, STACK, "nowhere", "nofabric")
"""Every name this test gives a file, folder, stack or lock."""


@pytest.fixture(scope="module")
def status_before() -> set[str]:
    return git_status()


@pytest.fixture(scope="module")
def tree(tmp_path_factory, status_before) -> Tree:
    root = tmp_path_factory.mktemp("checkout")
    for name in SHIPPED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=NOT_COPIED)
        else:
            shutil.copy2(source, root / name)
    before = hashes(root)
    copy_cloud(root / "goldenenv" / "clouds")
    copy_fabric(root / "goldenenv" / "fabrics")
    ship_stack_and_lock(root)
    scratch = tmp_path_factory.mktemp("home")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("GOLDENENV_", "PULUMI_", "PYTEST_"))},
           "PYTHONPATH": str(root), "COLUMNS": "250", "HOME": str(scratch),
           "PULUMI_BACKEND_URL": f"file://{scratch / 'state'}"}
    project = scratch / "proj"
    done = subprocess.run([sys.executable, "-m", "goldenenv", "init", str(project)], env=env, cwd=scratch,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    shutil.copy2(root / "stacks" / f"Pulumi.{STACK}.yaml", project / "stacks" / f"Pulumi.{STACK}.yaml")
    return Tree(root, project, env, before)


def goldenenv(tree: Tree, *args: str) -> subprocess.Popen:
    """`goldenenv ARGS` started in the project, with the copy's package (its output read by `finished`)."""
    return subprocess.Popen([sys.executable, "-m", "goldenenv", *args], env=tree.env, cwd=tree.project,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished(process: subprocess.Popen) -> tuple[int, str]:
    out, _ = process.communicate(timeout=300)
    return process.returncode, out


def python(tree: Tree, code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=tree.env, cwd=tree.project, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


# ---------------------------------------------------------------- what a user sees

BOOT = f"""
import copy, json
import goldenenv
from goldenenv import clouds, stackconfig
from goldenenv.clouds import base
from goldenenv.plan import plan_config

config = copy.deepcopy(stackconfig.read_stack_file(__import__("pathlib").Path("stacks/Pulumi.{STACK}.yaml")))
config["goldenenv:image"] = {{**(config.get("goldenenv:image") or {{}}), "ref": "{GOLDEN_REF}"}}
result = plan_config("{STACK}", config, strict=True)
limit = clouds.get("{CLOUD}").user_data_limit
hosts = {{}}
for resource in result.resources:
    data = limit.carried(resource)
    if data is not None:
        hosts[resource.name] = data.decode(errors="replace")
print(json.dumps({{"package": goldenenv.__file__, "limit": limit.max_bytes, "headroom": base.USER_DATA_HEADROOM,
                  "hosts": hosts, "failed": [f.message for f in result.findings if f.severity.name == "ERROR"]}}))
"""
"""Each host's boot as the contract renders it (test_contract_user_data): the stack planned strictly with a golden
image set, as `up` plans it, and each host's user data as the cloud's limit reads it from the planned resources."""

BUNDLED = """
import json, runpy, sys, tempfile
from pathlib import Path
from goldenenv.images import bundle

found = {}
with tempfile.TemporaryDirectory() as folder:
    for name, (text, table) in {"health": (bundle.health_judge(), "FABRIC_JUDGES"),
                                "spotwatch": (bundle.spot_watcher(), "NOTICES")}.items():
        script = Path(folder, f"goldenenv-{name}")
        script.write_bytes(text)
        found[name] = sorted(runpy.run_path(str(script), run_name="bundled")[table])
print(json.dumps(found))
"""
"""The node tools an image carries (goldenenv-health, goldenenv-spotwatch), as the image build bundles them, loaded
as the node loads them: with the fabric judges and spot notice parsers they found by discovery."""


def node_evidence(folder: Path, links: int) -> Path:
    """What a node of the new fabric saved for the health judge: its eRDMA links (`rdma link show`, ACTIVE), and
    what it is expected to have (expect.json: no GPU, two fabric devices)."""
    folder.mkdir(parents=True)
    (folder / "rdma_link.txt").write_text("".join(
        f"link erdma_{i}/1 state ACTIVE physical_state LINK_UP netdev eth{i}\n" for i in range(links)))
    (folder / "expect.json").write_text(json.dumps({"gpus": 0, "fabric": FABRIC, "fabric_devices": 2,
                                                    "nvlinks_per_gpu": 0, "nvswitch": False}))
    return folder


@pytest.fixture(scope="module")
def seen(tree: Tree) -> dict[str, tuple[int, str]]:
    """Every command's exit and output, run side by side (each command starts its own interpreter)."""
    bad_cloud = tree.project / "stacks" / "Pulumi.nowhere.yaml"
    bad_cloud.write_text((tree.project / "stacks" / f"Pulumi.{STACK}.yaml").read_text(encoding="utf-8").replace(
        f"goldenenv:cloud: {CLOUD}", "goldenenv:cloud: nowhere"), encoding="utf-8")
    bad_fabric = tree.project / "images" / "nofabric" / "lock.yaml"
    bad_fabric.parent.mkdir(parents=True)
    lock = yaml.safe_load((tree.root / "images" / LOCK / "lock.yaml").read_text(encoding="utf-8"))
    bad_fabric.write_text(yaml.safe_dump({**lock, "name": "nofabric", "fabric": "nowhere"}, sort_keys=False))
    shutil.copy2(tree.root / "stacks" / f"Pulumi.{FROM_STACK}.yaml", tree.project / "stacks")
    evidence = {links: node_evidence(tree.project / "evidence" / f"{links}-links", links) for links in (2, 1)}
    started = {
        "plan": goldenenv(tree, "plan", "--strict", "-s", STACK),
        "plan-alibaba": goldenenv(tree, "plan", "--strict", "--json", "-s", FROM_STACK),
        "boot": python(tree, BOOT),
        "bundled": python(tree, BUNDLED),
        "unknown-cloud": goldenenv(tree, "plan", "-s", "nowhere"),
        "image-list": goldenenv(tree, "image", "list"),
        "image-render": goldenenv(tree, "image", "render", LOCK),
        "check-lock-which-cloud": goldenenv(tree, "image", "check-lock", LOCK, "--instance-type", TYPE),
        "check-lock": goldenenv(tree, "image", "check-lock", LOCK, "--instance-type", TYPE, "--cloud", CLOUD),
        "health": goldenenv(tree, "health", "-s", STACK, "--from", str(evidence[2])),
        "health-one-link-down": goldenenv(tree, "health", "-s", STACK, "--from", str(evidence[1])),
        "estimate": goldenenv(tree, "estimate", "--model", "llama-3.1-8b", "--tokens", "1e8"),
        "estimate-type": goldenenv(tree, "estimate", "--model", "llama-3.1-8b", "--tokens", "1e8",
                                   "--instance-type", f"{CLOUD}:{TYPE}", "--nodes", "2"),
    }
    return {name: finished(process) for name, process in started.items()}


def test_the_new_cloud_plans_strict_and_passes_its_guardrails_and_readiness(seen):
    code, out = seen["plan"]
    assert code == 0, out
    assert f"goldenenv plan stack {STACK} · {CLOUD} cn-wulanchabu" in out
    for part in ("GpuCluster", "GpuNetwork", "DataStore", "SlurmHead", "GpuNodePool", "BudgetGuard",
                 "ImageRepository", "MungeSecret"):
        assert f" goldenenv:{CLOUD}:{part}" in out, part
    assert out.count(" alicloud:ecs/instance:Instance ") == 3, "two GPU nodes and the Slurm head"
    assert f"lock {LOCK} on goldenenv:nodes ({TYPE}, " in out and "): fits" in out
    assert "no guardrail failed" in out and " error " not in out


def test_the_new_clouds_nodes_boot_the_new_fabric_within_the_clouds_user_data_limit(seen, tree):
    code, out = seen["boot"]
    assert code == 0, out
    boot = json.loads(out.strip().splitlines()[-1])
    assert Path(boot["package"]).is_relative_to(tree.root), "the copy's goldenenv ran, not the checkout's"
    assert boot["failed"] == []
    room = int(boot["limit"] * boot["headroom"])
    assert boot["hosts"] and all(len(text.encode()) <= room for text in boot["hosts"].values()), {
        name: len(text) for name, text in boot["hosts"].items()}
    nodes = [text for name, text in boot["hosts"].items() if "-gpu-" in name]
    head = boot["hosts"][f"{STACK}-head"]
    assert len(nodes) == 2
    for text in nodes:
        assert f"goldenenv-{FABRIC}.service" in text and f"{FABRIC}-check.sh" in text, "the fabric's boot check"
        assert GOLDEN_REF in text
    assert f"munge-key-{CLOUD}.sh" in head, "the cloud's own munge key step, from its folder's template"


def test_the_images_tools_carry_the_new_fabrics_judge_and_the_new_clouds_spot_notices(seen):
    code, out = seen["bundled"]
    assert code == 0, out
    bundled = json.loads(out.strip().splitlines()[-1])
    assert FABRIC in bundled["health"] and FROM_FABRIC in bundled["health"]
    assert CLOUD in bundled["spotwatch"] and FROM_CLOUD in bundled["spotwatch"]


def test_every_command_that_lists_clouds_or_fabrics_lists_the_new_ones(seen):
    code, out = seen["unknown-cloud"]
    assert code == 2 and "'nowhere' is not a cloud goldenenv supports" in out and CLOUD in out, out
    code, out = seen["image-list"]
    assert re.search(rf"│ {re.escape(LOCK)} .*│ {FABRIC} ", out), out
    assert code == 2 and f"'{FABRIC}'" in out.split("fabric: must be one of", 1)[1], "the lock naming no fabric"
    code, out = seen["image-render"]
    assert code == 0 and f'dev.goldenenv.fabric="{FABRIC}"' in out, out
    assert "ibverbs-providers" in out, "the fabric's image layer, from its folder's template"
    code, out = seen["check-lock-which-cloud"]
    assert code == 2 and f"--cloud {CLOUD}" in out and f"--cloud {FROM_CLOUD}" in out, out
    code, out = seen["check-lock"]
    assert code == 0 and f"{LOCK} passes on {TYPE}" in out, out
    code, out = seen["health"]
    assert code == 0 and "1 of 1 node(s) healthy" in out, out
    code, out = seen["health-one-link-down"]
    assert code == 1 and "erdma_devices_below_expected" in out and "lists 1 ACTIVE" in out, out
    code, out = seen["estimate"]
    assert code == 0 and re.search(rf"│ {CLOUD} +│ {re.escape(TYPE)} ", out), out
    code, out = seen["estimate-type"]
    assert code == 0 and TYPE in out, out


def test_the_cloud_it_was_copied_from_still_plans_as_before(seen):
    code, out = seen["plan-alibaba"]
    planned = json.loads(out)
    errors = [f"{f['rule']}: {f['message']}" for f in planned["findings"] if f["severity"] == "error"]
    assert errors == [] and code == 0


def test_the_contract_tests_hold_the_new_cloud_with_no_test_written_for_it(tree):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         "-k", f"{CLOUD} or {FABRIC}", *contract_tests()],
        env=tree.env, cwd=tree.root, capture_output=True, text=True,
        timeout=600)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary, summary


def test_nothing_outside_the_two_folders_changed(tree, seen, status_before: set[str]):
    """Every file the copy took from the checkout is as it was once goldenenv ran with the new folders in it (the
    only files added beside them are the example stack and lock a cloud ships), and the checkout itself is untouched:
    everything ran in the copy."""
    after = hashes(tree.root)
    changed = sorted(p for p in tree.before if after.get(p) != tree.before[p])
    added = sorted(set(after) - set(tree.before))
    assert changed == []
    assert added == [f"images/{LOCK}/lock.yaml", f"stacks/Pulumi.{STACK}.yaml"]
    new = git_status() - status_before  # others may be editing the checkout meanwhile: only ours count
    assert not [entry for entry in new if any(word in entry for word in WORDS)], new
