"""What happens to the Google Cloud Slurm head when it is lost (README, "What survives what";
goldenenv/clouds/headrecovery.py)."""

from goldenenv.clouds.headrecovery import HeadRecovery

HEAD_RECOVERY = HeadRecovery(
    cloud="Google Cloud",
    by_itself=("the head is live-migrated out of host maintenance (onHostMaintenance MIGRATE) and restarted by "
               "Compute Engine when it crashes or its host fails (automaticRestart), with its name, address and boot "
               "disk, and it boots back into slurmctld"),
    otherwise="a deleted head comes back with the next `goldenenv up`",
    queue=("kept by a restart (slurmctld's state is on the boot disk, or on the shared file system when the stack "
           "has one); a head created again keeps it only from the shared file system"),
    source="https://cloud.google.com/compute/docs/instances/setting-vm-host-options",
    head_type="gcp:compute/instance:Instance",
    planned={"scheduling.automaticRestart": (True,), "scheduling.onHostMaintenance": ("MIGRATE",),
             "scheduling.provisioningModel": ("STANDARD",)},
)
