"""The capacity simulator's I/O: traces, the summary, plots (the event loop is core/simulate/)."""
