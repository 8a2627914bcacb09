"""What happens to the local Slurm head when it is lost (README, "What survives what";
goldenenv/clouds/headrecovery.py): the recovery container (clouds/local/recovery.py) plays the cloud's part, for the
head as for the nodes; tests/e2e/test_local_cluster.py kills it and finds the queue after."""

from goldenenv.clouds.headrecovery import HeadRecovery
from goldenenv.clouds.local.cluster import RECOVERY_DELAY_S

HEAD_RECOVERY = HeadRecovery(
    cloud="local",
    by_itself=(f"the recovery container starts a killed head container again after {RECOVERY_DELAY_S} s, as it "
               "does a node (Docker's restart policy ignores `docker kill`); `goldenenv jobs` answers again within "
               "seconds"),
    otherwise="`goldenenv up` starts a stopped head",
    queue=("kept, as slurmctld's state is in the stack's Slurm volume: the jobs it had saved (a few seconds after "
           "each change) are there, a running job keeps running and a pending one still waits; `goldenenv destroy` "
           "removes the volume"),
    source="https://docs.docker.com/engine/containers/start-containers-automatically/",
)
