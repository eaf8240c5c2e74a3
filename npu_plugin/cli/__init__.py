"""The npu-plugin command: flags, dispatch, exit codes, and the commands besides `serve`."""
