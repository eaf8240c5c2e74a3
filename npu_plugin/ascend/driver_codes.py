"""The Ascend driver's return codes, as DCMI's public header (`dcmi_interface_api.h`) defines them.

npu-smi reports the same failures in words, which `backends/npusmi/vnpu_parse.py` maps onto these
codes, and the fake backend raises them too: one vocabulary whatever the backend.
"""

OK = 0
INVALID_PARAMETER = -8001
OPER_NOT_PERMITTED = -8002
# Also what a create gets when the chip has too little of a resource left (`check aicore num
# failed`).
INNER_ERR = -8005
DEVICE_NOT_EXIST = -8008  # a chip or vNPU that is not there
RESOURCE_OCCUPIED = -8020
NOT_SUPPORT = -8255

ANY_VNPU_ID = 0xFFFFFFFF  # the vNPU id that asks the driver to choose one
