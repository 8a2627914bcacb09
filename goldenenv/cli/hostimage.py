"""`goldenenv host-image ...`: host images with a pool's pinned host layer baked in (goldenenv.images.bake)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from goldenenv.cli.common import HOSTS_BY, console, fail, lifecycle_failure, say, stack_spec
from goldenenv.clouds.base import HostsBy
from goldenenv.spec import ConfigError

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(name="host-image", no_args_is_help=True, context_settings=HELP,
                  help="Host images: a pool's pinned host layer (engine, toolkit, driver, fabric modules, file-system "
                       "clients) baked into an image per cloud, proven by the host checks.")


@app.command("build", context_settings=HELP)
def host_image_build(
    pool: str = typer.Argument(None, help="The pool whose host layer to bake; the stack's first pool by default."),
    stack: str = typer.Option(..., "--stack", "-s", help="Stack name (stacks/Pulumi.<stack>.yaml): its cloud, region, "
                              "zone, network and the pool's pinned stock host image."),
    hosts_by: HostsBy = HOSTS_BY,
    ssh_user: str = typer.Option(None, "--ssh-user", help="Log in to the build instance as this user (default: the "
                                 "pool's login, as validate uses)."),
    instance_type: str = typer.Option(None, "--instance-type", help="The build instance's type: a GPU type of the "
                                      "cloud's catalog (the host checks run the GPUs); the pool's own by default."),
    ssh_config: Path = typer.Option(None, "--ssh-config", help="ssh config for reaching the build instance (a "
                                    "bastion, SSM's ProxyCommand)."),
) -> None:
    """Bake the pool's host layer: a build instance from its pinned stock image runs the install script, the host
    checks prove it, its image is captured, tagged with the host lock's hash and recorded in
    images/hosts/<host lock>.published.yaml; the build instance is deleted, also on failure (exit 1 naming the
    step)."""
    from goldenenv import automation
    from goldenenv.images import bake, hostfiles

    spec = stack_spec(stack)
    try:
        target = bake.prepare(spec, pool, instance_type)
        driver = bake.PulumiDriver(spec)
        say(f"baking {target.layer.host_lock} ({', '.join(n for n, _ in target.layer.install)}) onto {target.base} "
            f"for pool {target.pool.name} on a {target.instance_type}, in build stack {target.stack_name}")
        entry = bake.bake(target, driver, log=lambda line: console.print(line, end="", highlight=False,
                                                                          markup=False),
                          hosts_by=hosts_by, ssh_user=ssh_user, ssh_config=str(ssh_config) if ssh_config else None)
    except ConfigError as e:
        fail(e)
    except (bake.BakeError, automation.LifecycleError) as e:
        lifecycle_failure(e)
    console.print(f"[bold green]baked {escape(entry.image)}[/] ({entry.base} with host layer {entry.layer}) in "
                  f"{entry.region}; recorded in {escape(str(hostfiles.published_path(target.host_lock.name)))}",
                  highlight=False)
