"""The local stack's tags: nothing to judge. Its containers and volumes carry them as Docker labels
(goldenenv.<key>, clouds/local/cluster.py), and a Docker label takes any text (clouds.tagrules reads RULE = None as
"no rule on this cloud")."""

RULE = None
NO_RULE = "local containers carry the stack's tags as Docker labels, which take any text: nothing is refused"
