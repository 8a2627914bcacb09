"""What the command groups share: the consoles, the options several commands take, and the helpers that load a
stack or a build's options and report a failure the same way everywhere."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from goldenenv import project
from goldenenv.clouds.base import HOST_OUTPUTS, HostsBy
from goldenenv.spec import ConfigError, Problem

console = Console(emoji=False)
errors = Console(stderr=True, emoji=False)


ALLOW_OVER_BUDGET = typer.Option(False, "--allow-over-budget", help="Go ahead with a run (goldenenv:run) or an "
                                 "hour at full use that the monthly budget cannot pay: a warning, not an error.")
CA_CERT = typer.Option(None, "--ca-cert", envvar="PIP_CERT", help="Extra CA bundle for pip in builder stages.")
INDEX_URL = typer.Option(None, "--pip-index-url", envvar="PIP_INDEX_URL", help="Package index (may hold credentials).")
APT_MIRROR = typer.Option(None, "--apt-mirror", help="Distribution mirror for the base and OS packages.")
WHEELHOUSE = typer.Option(None, "--wheelhouse", envvar="PIP_FIND_LINKS", help="Folder of local wheels (e.g. CPU torch).")
DEFAULT_STACK = "local"
STACK = typer.Option(DEFAULT_STACK, "--stack", "-s", help="Stack name (stacks/Pulumi.<stack>.yaml); local by default.")
HOSTS_BY = typer.Option(
    None, "--hosts-by", case_sensitive=False, help="Cloud stacks: address the nodes by their private IPs (the stack's "
    "nodePrivateIps; the default: from the VPC, a VPN or adminCidrs) or by instance id (instanceIds), for an ssh "
    "config whose ProxyCommand takes one, e.g. on AWS 'Host i-*' with 'ProxyCommand aws ssm start-session --target "
    "%h --document-name AWS-StartSSHSession --parameters portNumber=%p'.")


def fail(e: ConfigError, source: Path | None = None) -> None:
    """Bad input: its heading (`invalid stack configuration`, `invalid lock`) and file, one line per problem; exit 2."""
    source = e.source or (source if e.about == "file" else None)
    errors.print(f"[bold red]{escape(e.heading)}[/]" + (f" in {escape(str(source))}" if source else ""),
                 soft_wrap=True)
    for p in e.problems:
        key, _, message = str(p).partition(": ")
        errors.print(f"  [red]{escape(key)}[/]: {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def examples() -> Path:
    """The project's examples/, else the packaged ones: the training the drill and the flow run."""
    return project.current().examples_folder()


def options(ca_cert, pip_index_url, apt_mirror, wheelhouse):
    from goldenenv.images.dockerfile import BuildOptions

    folder = Path(wheelhouse) if wheelhouse and Path(wheelhouse).is_dir() else None
    return BuildOptions(Path(ca_cert) if ca_cert else None, pip_index_url, apt_mirror, folder)


def stack_spec(stack: str):
    from goldenenv.lifecycle import load_spec
    from goldenenv.plan import stack_file

    try:
        return load_spec(stack)
    except ConfigError as e:
        fail(e, stack_file(stack))


def say(message: str) -> None:
    console.print(f"[dim]·[/] {escape(message)}", highlight=False)


def print_line(node: str, text: str) -> None:
    console.print(f"[cyan]\\[{node}][/] {escape(text)}", highlight=False, soft_wrap=True)


def cloud_line(line: str) -> None:
    """Pulumi's own output arrives with its line ends; goldenenv's steps without."""
    console.print(escape(line), end="" if line.endswith("\n") else "\n", highlight=False)


def lifecycle_failure(e: Exception) -> None:
    errors.print(f"[bold red]{escape(str(e))}[/]")
    raise typer.Exit(1)


def cloud_targets(spec, hosts: str | None, hosts_by: HostsBy | None,
                  ssh_user: str | None) -> tuple[list[str], dict | None]:
    """The nodes validate and run log in to, and the stack outputs when they were read: --hosts as given, else the
    stack's nodes addressed as --hosts-by says (the cloud's node_hosts), as --ssh-user or each pool's login (the
    cloud's node_login: the key's user, or the caller's own on OS Login and Entra ID)."""
    from goldenenv import automation, clouds
    from goldenenv.clouds import access

    if hosts and hosts_by:
        errors.print("--hosts names the nodes itself, --hosts-by picks them from the stack outputs: give one")
        raise typer.Exit(2)
    if hosts:
        return [h.strip() for h in hosts.split(",") if h.strip()], None
    if not any(pool.ssh_public_key for pool in spec.nodes):
        say("no pool sets nodes.sshPublicKey, so the nodes took no SSH key from goldenenv: ssh logs in only with "
            "a key the host image brings (plan says how else to reach them)")
    cloud = clouds.get(spec.cloud)
    by = hosts_by or HostsBy.PRIVATE_IP
    outputs = automation.outputs(spec)
    targets = access.node_targets(cloud, spec, outputs, ssh_user, by)
    if not targets:
        raise ConfigError([Problem(f"stack {spec.stack}", f"no nodes in the stack output {HOST_OUTPUTS[by]}: "
                                   "goldenenv up first, or name them with --hosts ssh://user@address,...")])
    return targets, outputs
