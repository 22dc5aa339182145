"""gangctl: the command line for people and scripts."""
