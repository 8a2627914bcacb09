"""`goldenenv image ...`: golden images from their locks (list, render, check-lock, pin, build, prune, push, check)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from goldenenv.cli.common import (APT_MIRROR, CA_CERT, INDEX_URL, WHEELHOUSE, console, errors, fail,
                                  lifecycle_failure, options, say, stack_spec)
from goldenenv.spec import ConfigError

app = typer.Typer(name="image", no_args_is_help=True,
                  help="Golden images: one lock → compatibility check → Dockerfile → build → checks.")


def _lock(name: str):
    from goldenenv.images.lock import load

    try:
        return load(name)
    except ConfigError as e:
        fail(e)


@app.command("list")
def image_list() -> None:
    """Every lock under images/, with its pins and whether it is built here (a lock that cannot be read: its
    first problem, and exit 2)."""
    from goldenenv.images.lock import load, names

    built = _local_tags()
    table = Table()
    for col in ("image", "tag", "torch", "cuda", "nccl", "fabric", "built"):
        table.add_column(col)
    broken = []
    for name in names():
        try:
            lock = load(name)
        except ConfigError as e:
            broken.append(e)
            table.add_row(name, f"[red]invalid[/]: {escape(str(e.problems[0]))}", "-", "-", "-", "-", "-")
            continue
        table.add_row(name, lock.tag, lock.torch or "-", lock.cuda or "-", lock.nccl or "-", lock.fabric,
                      "?" if built is None else ("yes" if lock.tag in built else "no"))
    console.print(table)
    if broken:
        fail(broken[0])


def _local_tags() -> set[str] | None:
    try:
        import docker

        return {t for image in docker.from_env().images.list() for t in image.tags}
    except Exception:  # noqa: BLE001 - no engine: the column says "?"
        return None


@app.command("render")
def image_render(name: str, out: Path = typer.Option(None, "--out", help="Write the whole build context here.")) -> None:
    """Print the Dockerfile the lock renders to (or write the build context). A lock whose EFA installer has no
    checksum is refused, as `image build` refuses it: its Dockerfile would check the tarball against nothing."""
    from goldenenv.images import dockerfile
    from goldenenv.images.base import bootstrap_tag
    from goldenenv.images.lock import lock_path
    from goldenenv.spec import LockError, Problem

    lock = _lock(name)
    if lock.efa and not lock.efa.installer_sha256:
        fail(LockError([Problem("efa.installerSha256", f"not set: the EFA installer {lock.efa.installer} cannot be "
                                "verified; add the sha256 of its tarball (aws-efa-installer-"
                                f"{lock.efa.installer}.tar.gz)")], lock_path(name)))
    base_ref = lock.base.ref or bootstrap_tag(lock.base.bootstrap)
    if lock.base.unverified_image:
        errors.print(f"[yellow]warning[/] {escape(dockerfile.base_note(lock))}", highlight=False)
    if out:
        dockerfile.write_context(lock, base_ref, dockerfile.BuildOptions(), out)
        console.print(f"build context for {lock.tag} in {out}")
    else:
        print(dockerfile.dockerfile(lock, base_ref), end="")


CLOUD_HELP = "The cloud whose catalog lists --instance-type; found from the type when one cloud's catalog lists it."


def _cloud_of(instance_type: str | None, cloud: str | None) -> str | None:
    """The cloud an --instance-type is judged on: --cloud when given, else the one cloud whose catalog lists the
    type. No cloud lists it, or several do: a usage error (exit 2) saying which --cloud to give."""
    if cloud or not instance_type:
        return cloud
    from goldenenv import catalog

    known = sorted({r["cloud"] for r in catalog.rows("instance_types")})
    listing = [c for c in known if _lists(c, instance_type)]
    if len(listing) == 1:
        return listing[0]
    if listing:
        errors.print(f"--instance-type {escape(instance_type)}: the catalogs of {' and '.join(listing)} list it; "
                     f"give --cloud {' or --cloud '.join(listing)}", highlight=False)
    else:
        errors.print(f"--instance-type {escape(instance_type)}: no cloud's catalog lists it; give --cloud (one of "
                     f"{', '.join(known)}) and an instance type that cloud's catalog lists", highlight=False)
    raise typer.Exit(2)


def _lists(cloud: str, instance_type: str) -> bool:
    from goldenenv import catalog

    try:
        catalog.instance_type(cloud, instance_type)
    except KeyError:
        return False
    return True


@app.command("check-lock")
def image_check_lock(
    name: str,
    instance_type: str = typer.Option(None, "--instance-type", help="Can the lock run on this instance type?"),
    driver: str = typer.Option(None, "--driver", help="... with this NVIDIA driver (e.g. 550.54.15)?"),
    cloud: str = typer.Option(None, "--cloud", help=CLOUD_HELP),
    wheelhouse: str = WHEELHOUSE,
) -> None:
    """Compatibility of the lock's pins with each other, the catalog and optionally a node."""
    from goldenenv import compat

    lock = _lock(name)
    cloud = _cloud_of(instance_type, cloud)
    folder = Path(wheelhouse) if wheelhouse and Path(wheelhouse).is_dir() else None
    found = (compat.can_run(lock, cloud, instance_type, driver, wheelhouse=folder) if instance_type
             else compat.check_lock(lock, folder))
    for c in found:
        colour = "red" if c.severity == "error" else "yellow"
        console.print(f"[{colour}]{c.severity}[/] {c.rule}: {escape(c.message)}", highlight=False)
    errors_found = [c for c in found if c.severity == "error"]
    where = f" on {instance_type}" + (f" with driver {driver}" if driver else "") if instance_type else ""
    if errors_found:
        console.print(f"[bold red]{name} is refused{where}[/]")
        raise typer.Exit(1)
    minimum = f"; minimum driver {compat.min_driver(lock.cuda)}" if lock.cuda else ""
    console.print(f"[bold green]{name} passes{where}[/] ({lock.tag}{minimum})")


@app.command("pin")
def image_pin(name: str, wheelhouse: str = WHEELHOUSE, pip_index_url: str = INDEX_URL) -> None:
    """Resolve the lock's pins and requirements into hash-pinned packages (rewrites its packages section)."""
    from goldenenv.images import pin
    from goldenenv.images.lock import lock_path

    lock = _lock(name)
    if lock.extends:
        errors.print(f"{name}/lock.yaml: extends: {name} takes its pins from {lock.extends}; "
                     f"run goldenenv image pin {lock.extends}")
        raise typer.Exit(2)
    from goldenenv import accelerators

    family = accelerators.of_lock(lock)
    platform = family.platform(lock) if family else "linux/amd64"
    if platform != "linux/amd64":  # pip's --platform keeps this machine's markers (platform_machine == "x86_64")
        errors.print(f"{name}/lock.yaml: {family.lock_section}.platform: image pin resolves for linux/amd64 only, "
                     f"and {name} is {platform}: its packages would be replaced by linux/amd64 wheels. Pin "
                     f"{platform} wheels by hand as its lock's comment says (goldenenv image check-lock {name} "
                     "refuses a wheel of another platform)")
        raise typer.Exit(2)
    folder = Path(wheelhouse) if wheelhouse and Path(wheelhouse).is_dir() else None
    with console.status(f"resolving {name} for Python {lock.python}"):
        try:
            packages = pin.pin(lock, folder, pip_index_url)
        except RuntimeError as e:
            errors.print(f"[red]{escape(str(e))}[/]")
            raise typer.Exit(1) from None
    pin.write_packages(lock_path(name), packages)
    console.print(f"{name}: {len(packages)} distributions pinned → {_lock(name).tag}")


@app.command("build")
def image_build(name: str, ca_cert: str = CA_CERT, pip_index_url: str = INDEX_URL, apt_mirror: str = APT_MIRROR,
                wheelhouse: str = WHEELHOUSE) -> None:
    """Check the lock, bootstrap the base if it cannot be pulled, and build the image. At a terminal a progress bar
    shows the step now running; in a pipe or a log, a line as each step ends with its seconds, and a line at least
    every 10 s during a long one."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from goldenenv.images.build import build

    lock = _lock(name)
    build_options = options(ca_cert, pip_index_url, apt_mirror, wheelhouse)
    if not console.is_terminal:  # one line each, never wrapped: a log is read, and grepped, line by line
        built = _built(lambda: build(lock, build_options, log=lambda m: console.print(
            f"[dim]·[/] {escape(m)}", highlight=False, soft_wrap=True)))
    else:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("{task.fields[step]}"), console=console) as progress:
            task = progress.add_task(name, total=None, step="base")

            def on_step(n: int, total: int, text: str) -> None:
                progress.update(task, completed=n - 1, total=total, step=escape(text[:60]))

            built = _built(lambda: build(lock, build_options, on_step=on_step,
                                         log=lambda m: progress.update(task, step=escape(m[:60]))), progress.stop)
            progress.update(task, completed=built.steps, total=built.steps, step="done")
    console.print(f"built {built.tag} in {built.seconds:.0f} s ({built.cached_steps}/{built.steps} steps cached)")


def _built(action, stop=lambda: None):
    """The build's result; a failed build's message (and the failed step's output), exit 1."""
    from goldenenv.images.base import BaseError
    from goldenenv.images.build import BuildError

    try:
        return action()
    except BuildError as e:
        stop()
        errors.print(f"[bold red]{escape(str(e))}[/]")
        if e.log:
            errors.print(escape(e.log.rstrip()[-4000:]), highlight=False)
        raise typer.Exit(1) from None
    except BaseError as e:
        stop()
        errors.print(f"[bold red]{escape(str(e))}[/]")
        raise typer.Exit(1) from None
    except ConfigError as e:
        stop()
        fail(e)


@app.command("prune")
def image_prune(name: str = typer.Argument(None, help="One image's builder cache; all images when omitted.")) -> None:
    """Free the builder stages kept as layer cache (goldenenv-builder/NAME:STAGE); built images stay."""
    import docker

    from goldenenv.images.build import remove_builders

    removed = remove_builders(docker.from_env(), name)
    console.print(f"removed {len(removed)} builder stages" + (f" of {name}" if name else "")
                  + "; the next build of each starts cold", highlight=False)


@app.command("push")
def image_push(
    name: str,
    registry: str = typer.Option(None, "--registry", help="HOST, HOST:PORT or HOST:PORT/PATH: pushes "
                                 "<registry>/<name>:<lock hash>-<image id>."),
    stack: str = typer.Option(None, "--stack", "-s", help="Push to this cloud stack's own repository "
                              "(created first if needed; needs the Pulumi CLI and credentials)."),
) -> None:
    """Push a built image and record its digest in images/<name>/published.yaml, where stacks read it."""
    import docker

    from goldenenv import automation, clouds
    from goldenenv.images import publish, size

    lock = _lock(name)
    if bool(registry) == bool(stack):
        errors.print("give exactly one of --registry URL or --stack STACK")
        raise typer.Exit(2)
    auth = repository = pulled_from = None
    try:
        if stack:
            spec = stack_spec(stack)
            if spec.image.lock != name:
                errors.print(f"stack {stack} runs lock {spec.image.lock}, not {name}")
                raise typer.Exit(2)
            if not clouds.get(spec.cloud).registry_types:
                errors.print(f"stack {stack} is on the {spec.cloud} cloud, which has no image repository of its own "
                             "to push to: push with --registry HOST instead")
                raise typer.Exit(2)
            repository = automation.image_repository(spec, log=lambda line: console.print(line, end="", highlight=False))
            registry = repository.split("/", 1)[0]
            auth = automation.registry_auth(spec, registry)
            pulled_from = automation.registry_pulled_as(spec, repository)
        engine = docker.from_env()
        entry = publish.push(lock, registry, engine, auth=auth, log=say,
                             measure=lambda tag: size.compressed_bytes(engine, tag),
                             repository=repository, pulled_from=pulled_from)
    except (publish.PushError, automation.LifecycleError) as e:
        lifecycle_failure(e)
    except ConfigError as e:  # what the stack's cloud needs set first (its project, its subscription)
        fail(e)
    console.print(f"pushed {entry.ref}" + (f" ({entry.compressed_bytes / 1e9:.2f} GB compressed)"
                                           if entry.compressed_bytes else ""), highlight=False)
    console.print(f"recorded in {publish.published_path(name)}: stacks running {name} without image.ref pull it",
                  highlight=False)


@app.command("check")
def image_check(
    name: str,
    hosts: str = typer.Option(None, "--hosts", help="Check nodes instead: ssh://user@node,... (testinfra hosts)."),
    exec_prefix: str = typer.Option("", "--exec-prefix", help="On nodes, run probes in the container: 'docker exec goldenenv'."),
    gpu_checks: bool = typer.Option(False, "--gpu", help="Also check driver, GPUs, torch on GPUs and an all-reduce."),
    instance_type: str = typer.Option(None, "--instance-type"),
    cloud: str = typer.Option(None, "--cloud", help=CLOUD_HELP),
) -> None:
    """Prove the built image (or live nodes) match the lock: one case per pin."""
    import subprocess

    from goldenenv.checks import run
    from goldenenv.images.lock import lock_path

    lock = _lock(name)
    cloud = _cloud_of(instance_type, cloud)
    extra = (["--cloud", cloud] if cloud else []) + (["--gpu"] if gpu_checks else []) + (
        ["--instance-type", instance_type] if instance_type else []) + (
        ["--exec-prefix", exec_prefix] if exec_prefix else [])
    if hosts:
        done = subprocess.run(run.pytest_command(lock_path(name), hosts, extra), capture_output=True, text=True)
        result = run.CheckResult(done.returncode == 0, done.stdout + done.stderr)
    else:
        built = _local_tags()
        if built is not None and lock.tag not in built:
            errors.print(f"[red]{lock.tag} is not built here: goldenenv image build {name}[/]")
            raise typer.Exit(1)
        result = run.check_image(lock, extra=extra)
    console.print(result.output.rstrip(), highlight=False, markup=False)
    if not result.passed:
        raise typer.Exit(1)
    console.print(f"[bold green]{lock.tag} matches its lock[/]")
