"""`python -m npu_plugin` is the `npu-plugin` command."""

import sys

from npu_plugin.cli.main import main

sys.exit(main())
