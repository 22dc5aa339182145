"""Pure domain logic: plain data in, decisions out. No I/O, no clocks, no Kubernetes client."""
