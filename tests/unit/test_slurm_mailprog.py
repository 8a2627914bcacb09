"""slurmctld starts without "Configured MailProg is invalid": slurm.conf names a mail program the golden image has.

Slurm's default MailProg is /bin/mail, which the golden image does not install; slurmctld checks it can run it at
every start and logs the error. Every shipped stack's slurm.conf names a program of coreutils (Essential on every
Debian and Ubuntu base the locks build from), here found on this Debian machine too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from goldenenv import clouds
from goldenenv.nodeboot import slurm_conf
from goldenenv.plan import plan

REPO = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (REPO / "stacks").glob("Pulumi.*.yaml"))


def settings(conf: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in conf.splitlines() if "=" in line and not line.startswith("#"))


@pytest.mark.parametrize("stack", STACKS)
def test_slurm_conf_names_a_mail_program_the_golden_image_can_run(stack):
    spec = plan(stack, REPO / "stacks").spec
    if spec.scheduler != "slurm":
        pytest.skip(f"{stack} runs no scheduler")
    mail = settings(slurm_conf(spec, clouds.get(spec.cloud).slurmd_timeout)).get("MailProg")
    assert mail and mail.startswith("/"), "slurm.conf leaves MailProg at Slurm's /bin/mail, absent in the image"
    assert mail != "/bin/mail"
    assert os.access(mail, os.X_OK), mail
