"""The one seam to the Kubernetes API server: only this package talks to it.

`protocol.py` is the interface (`KubeApi` and the wire types), `client.py` implements it over
`connection.py`, every response checked by `bodies.py`."""
