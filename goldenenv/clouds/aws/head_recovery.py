"""What happens to the AWS Slurm head when it is lost (README, "What survives what";
goldenenv/clouds/headrecovery.py)."""

from goldenenv.clouds.headrecovery import UNSET, HeadRecovery

HEAD_RECOVERY = HeadRecovery(
    cloud="AWS",
    by_itself=("EC2's simplified automatic recovery, on by default for types without instance-store volumes (the "
               "head's default type has none), moves a head whose host fails to healthy hardware with its instance "
               "id, address and EBS root volume (up to three tries a day), and it boots back into slurmctld"),
    otherwise="a terminated head, or a failure recovery does not cover, comes back with the next `goldenenv up`",
    queue=("kept by recovery (slurmctld's state is on the root volume, or on FSx when the stack has it); a head "
           "created again keeps it only from FSx"),
    source="https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-recover.html",
    head_type="aws:ec2/instance:Instance",
    planned={"maintenanceOptions.autoRecovery": (UNSET, "default"), "instanceMarketOptions": (UNSET,)},
)
