"""The local cloud's numbers that both its Cloud class (clouds/local/__init__.py) and its cluster (cluster.py) read.

Here, below both, so the cluster does not import the Cloud class that imports it.
"""

DATA = "/data"
"""The data volume's mount in every node and head container: jobs, checkpoints and code live there."""
SLURMD_TIMEOUT_S = 10
"""slurm.conf SlurmdTimeout on the local cloud: a lost node container is DOWN this soon, so the local drill sees
its requeue quickly."""
