"""gangctl: the command line for people and scripts."""

import os

# gRPC's C core logs handshake failures to stderr itself; gangctl says what failed in one line.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
