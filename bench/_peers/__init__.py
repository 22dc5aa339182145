"""bench/peers.py's parts: the workload (gangs drawn from the Kalos trace), the systems that
run it (gangplugin and its peers, each on its own local cluster), what is watched while they
run it, the figures computed from plain data afterwards, and the table."""
