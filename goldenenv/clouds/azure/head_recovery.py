"""What happens to the Azure Slurm head when it is lost (README, "What survives what";
goldenenv/clouds/headrecovery.py).

Azure's service healing has no setting on the VM: every regular (not spot) VM has it, so the plan can only be held
to asking for a regular VM."""

from goldenenv.clouds.headrecovery import UNSET, HeadRecovery

HEAD_RECOVERY = HeadRecovery(
    cloud="Azure",
    by_itself=("service healing moves a head whose host fails to a healthy host (usually within 15 minutes), with "
               "its managed OS disk and address, and it boots back into slurmctld"),
    otherwise="a deleted head comes back with the next `goldenenv up`",
    queue=("kept by service healing (slurmctld's state is on the OS disk, or on the shared file system when the "
           "stack has one); a head created again keeps it only from the shared file system"),
    source="https://azure.microsoft.com/en-us/blog/service-healing-auto-recovery-of-virtual-machines/",
    head_type="azure-native:compute:VirtualMachine",
    planned={"priority": (UNSET, "Regular")},
)
