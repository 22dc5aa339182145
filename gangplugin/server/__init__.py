"""`gangplugin serve`: one process that runs the chosen components over shared watch caches."""
