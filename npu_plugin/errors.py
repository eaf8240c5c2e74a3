"""The project's exception hierarchy; exit codes are decided only in the CLI.

NpuPluginError                 anything this program reports to a user without a traceback
├── ConfigError                a bad flag or environment value (exit 2)
├── InventoryFileError         a malformed inventory file (names file, line and field)
├── BackendError               a discovery backend failed or found nothing usable
│   ├── NpuSmiParseError       npu-smi printed something we cannot read
│   ├── DcmiError              a DCMI call returned an error code
│   └── VnpuError              the driver refused to create or destroy a vNPU (carries its code)
│       └── VnpuNotFoundError  the vNPU to destroy does not exist (counts as destroyed)
├── AllocationError            a request names a device we must not hand out
├── ClaimError                 a ResourceClaim cannot be prepared (per claim, others unaffected)
├── CheckpointError            the checkpoint file or the state lock cannot be read or written
├── CdiError                   a CDI spec file cannot be written or removed
├── KubeApiError               the Kubernetes API answered with an error or could not be reached
└── MigrateError               a manifest cannot be rewritten (names document and container)
"""

import errno
import os

ERROR_QUOTE_LIMIT = 100


def clipped(text: str) -> str:
    """`text` for an error message, cut short: what we quote comes from outside (a gRPC string, an
    API object, a file) and can be megabytes, more than a gRPC status or a log line should carry."""
    return text if len(text) <= ERROR_QUOTE_LIMIT else f"{text[:ERROR_QUOTE_LIMIT]}... ({len(text)} characters)"


def quoted(value: object) -> str:
    """`repr(value)`, clipped."""
    return clipped(repr(value))


def describe_os_error(error: OSError, path: object = None) -> str:
    """An OSError as one line naming the path and what the errno means:
    `/var/lib/npu/checkpoint.json: Is a directory (EISDIR)`. `path` overrides the error's own file
    name (which may be a temporary file or missing)."""
    where = path if path is not None else error.filename
    if path is None and error.filename2 is not None:
        where = f"{error.filename} -> {error.filename2}"
    code = errno.errorcode.get(error.errno) if error.errno is not None else None
    meaning = error.strerror or (os.strerror(error.errno) if error.errno is not None else str(error))
    text = f"{meaning} ({code})" if code else meaning
    return f"{where}: {text}" if where is not None else text


class NpuPluginError(Exception):
    """An expected failure, reported as one clear line."""


class ConfigError(NpuPluginError):
    """A flag or its environment twin has a value we do not accept."""


class InventoryFileError(NpuPluginError):
    """The fake inventory file is malformed."""


class BackendError(NpuPluginError):
    """A discovery backend could not produce devices."""


class NpuSmiParseError(BackendError):
    """npu-smi output we cannot interpret."""


class DcmiError(BackendError):
    """A DCMI library call failed."""

    def __init__(self, call: str, code: int) -> None:
        super().__init__(f"DCMI {call} failed with error code {code}")
        self.call = call
        self.code = code


class VnpuError(BackendError):
    """Creating or destroying a vNPU failed; `code` is the driver's (DCMI) error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (DCMI {code})")
        self.code = code


class VnpuNotFoundError(VnpuError):
    """The vNPU does not exist: for a destroy, the wanted state already holds."""


class AllocationError(NpuPluginError):
    """A device id cannot be allocated (unknown, unhealthy, or owned by the other mode)."""


class ClaimError(NpuPluginError):
    """A ResourceClaim cannot be prepared."""


class CheckpointError(NpuPluginError):
    """The DRA checkpoint cannot be read or written."""


class CdiError(NpuPluginError):
    """A CDI spec file cannot be written or removed."""


class KubeApiError(NpuPluginError):
    """A Kubernetes API call failed; `status` is the HTTP status, 0 when the server was not reached.
    `retry_after` is the server's Retry-After in seconds, when it sent one (429, 503)."""

    def __init__(self, action: str, status: int, reason: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{action}: {'HTTP ' + str(status) if status else 'unreachable'}: {reason}")
        self.status = status
        self.retry_after = retry_after


class MigrateError(NpuPluginError):
    """A manifest cannot be migrated."""


def listen_error(flag: str, address: str, port: int, error: OSError) -> NpuPluginError:
    """A server port that cannot be opened, as one line naming the flag: `--metrics-port 9100: cannot listen on
    0.0.0.0:9100: Address already in use (EADDRINUSE)`."""
    host = f"[{address}]" if ":" in address else address
    return NpuPluginError(f"{flag} {port}: {describe_os_error(error, f'cannot listen on {host}:{port}')}")
