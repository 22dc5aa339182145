"""What every component runs on: the `Runtime` (client, watch caches, failure reporting), the
embedded HTTP serving of JSON endpoints (`asgi`), and the Prometheus metrics. `server/` only
assembles components over it; components import this layer, never `server/`."""
