"""What happens to the Alibaba Cloud Slurm head when it is lost (README, "What survives what";
goldenenv/clouds/headrecovery.py)."""

from goldenenv.clouds.headrecovery import UNSET, HeadRecovery

HEAD_RECOVERY = HeadRecovery(
    cloud="Alibaba Cloud",
    by_itself=("ECS's default maintenance action, automatic restart for recovery (AutoRecover), restarts a head whose "
               "host fails (system event SystemFailure.Reboot) with its instance id, address and cloud disks, and it "
               "boots back into slurmctld"),
    otherwise="a released head comes back with the next `goldenenv up`",
    queue=("kept by recovery (slurmctld's state is on the system disk, or on CPFS when the stack has it); a head "
           "created again keeps it only from CPFS"),
    source="https://www.alibabacloud.com/help/en/ecs/user-guide/modify-instance-maintenance-attributes",
    head_type="alicloud:ecs/instance:Instance",
    planned={"maintenanceAction": (UNSET, "AutoRecover"), "spotStrategy": (UNSET, "NoSpot")},
)
