"""Both mode's handover: which API holds a device, from PodResources and the DRA checkpoint."""
