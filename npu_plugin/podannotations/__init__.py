"""The pod annotations MindCluster's device plugin writes, written by npu-plugin in both modes."""
