"""Kueue admission check `gangplugin.io/gang`: gang admission, readiness watchdog, backoff."""
