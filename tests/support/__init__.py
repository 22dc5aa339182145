"""The one home of what the tests, the benchmarks and the soak share (never a test module).

Everything imports it as `tests.support.<module>`: pytest finds the package from the checkout's
root, and the scripts in bench/ put that root on sys.path first.
"""
