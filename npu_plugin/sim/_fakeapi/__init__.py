"""Internals of the fake Kubernetes API server; the public face is `npu_plugin.sim.fakeapi`."""
