"""What every component runs on: the `Runtime` (client, watch caches, failure reporting), the
embedded HTTP serving of JSON endpoints (`asgi`), the Prometheus metrics, and the freezing of
long-lived state out of the cycle collector (`memory`). `server/` only assembles components
over it; components import this layer, never `server/`."""
