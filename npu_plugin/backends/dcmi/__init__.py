"""The DCMI backend: Huawei's libdcmi through ctypes."""
