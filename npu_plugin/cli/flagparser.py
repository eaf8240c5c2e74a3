"""argparse with environment twins: every long flag declared through `FlagParser` (or one of its
groups) reads its default from the environment, says its default and variable in --help, and records
whether it was given, so that `cli/main.py` can declare flags and nothing else.

A flag's twin is `NPU_PLUGIN_` + its name upper-cased with `-` as `_` (the seed manifests'
`NODE_NAME` and `POD_UID` for --node-name and --pod-uid). A few flags also read the names other
Ascend DRA manifests and kubectl use. Precedence: the command line, then the twin, then the alias,
then the built-in default. A value the flag's checker refuses is kept as a `BadEnvironment` and
reported after parsing, naming the variable. A flag whose name another command declared first, with
another meaning, names that command (`twin_owner`) and reads no variable: a twin applies to the
command that owns the flag only.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from npu_plugin.cli.flagtypes import FALSE_WORDS, TRUE_WORDS

EXIT_USAGE = 2

# Twins the seed manifests already name.
_TWIN_OVERRIDES = {"node-name": "NODE_NAME", "pod-uid": "POD_UID"}
# Names other Ascend DRA manifests (openFuyao, mind-cluster) and kubectl use; read when the twin is
# unset.
ENV_ALIASES: dict[str, tuple[str, ...]] = {
    "cdi-root": ("CDI_ROOT",),
    "kubelet-registrar-directory-path": ("KUBELET_REGISTRAR_DIRECTORY_PATH",),
    "kubelet-plugins-directory-path": ("KUBELET_PLUGINS_DIRECTORY_PATH",),
    "healthcheck-port": ("HEALTHCHECK_PORT",),
    "kubeconfig": ("KUBECONFIG",),
}
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")  # a value, as argparse reads it
_COMMAND_LINE = "the command line"


def env_name(flag: str) -> str:
    """The environment twin of `--flag`."""
    return _TWIN_OVERRIDES.get(flag, "NPU_PLUGIN_" + flag.upper().replace("-", "_"))


@dataclass(frozen=True, slots=True)
class BadEnvironment:
    """A default taken from the environment that its flag's checker refused; reported after
    parsing."""

    variable: str
    value: str
    problem: str

    def __str__(self) -> str:
        return f"{self.variable}={self.value!r}: {self.problem}"


@dataclass(frozen=True, slots=True)
class Unknown:
    """An argument that looks like a flag and is none of the parser's: `-hotReset=-1` is given as
    `-hotReset` and named `hotReset`."""

    given: str
    name: str

    @property
    def one_dash(self) -> bool:
        return not self.given.startswith("--")


class _Given(argparse.Action):
    """Stores the value and records that the flag was given on the command line."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        _record(namespace, self.option_strings)


class _Switch(argparse.Action):
    """`store_true` that records that the flag was given."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, True)
        _record(namespace, self.option_strings)


class _Append(argparse.Action):
    """`append` whose first value on the command line replaces a default taken from the
    environment."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        earlier = getattr(namespace, self.dest) if _flag_of(self.option_strings) in _given(namespace) else None
        setattr(namespace, self.dest, [*(earlier or []), values])
        _record(namespace, self.option_strings)


def _looks_like_flag(argument: str) -> bool:
    """`-x`, `--x`, `-hotReset=-1`; not `-` (stdin), `--` or a negative number, which are values."""
    return argument.startswith("-") and argument not in ("-", "--") and not _NEGATIVE_NUMBER.fullmatch(argument)


def _flag_of(option_strings: Sequence[str]) -> str:
    return next(s for s in option_strings if s.startswith("--"))


def _given(namespace: argparse.Namespace) -> dict[str, str]:
    given: dict[str, str] = getattr(namespace, "given", {})
    return given


def _record(namespace: argparse.Namespace, option_strings: Sequence[str]) -> None:
    namespace.given = {**_given(namespace), _flag_of(option_strings): _COMMAND_LINE}


class FlagParser(argparse.ArgumentParser):
    """argparse with environment twins as defaults, help naming default and variable, and one-line
    errors.

    Every long flag declared through it (its argument groups included) gets the same treatment, so a
    sub-command declaring its own flags cannot forget its twins.
    """

    def __init__(self, *args: Any, environ: Mapping[str, str] = os.environ, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # --log is no flag, not --log-level
        super().__init__(*args, **kwargs)
        self.environ = environ
        self.flags: list[str] = []
        self.from_environment: dict[str, str] = {}  # flag -> the variable that supplied its default
        self.subcommands: dict[str, FlagParser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        return self.declare(super().add_argument, names, kwargs)

    def unknown_flags(self, argv: Sequence[str], takes_value: Callable[[str], bool]) -> list[Unknown]:
        """Every argument of `argv` that looks like a flag and is none of this parser's, found before
        argparse reads them: it would take `-hotReset=-1` for `-h` with an argument.

        The value of a flag of ours is skipped (an optional one only when it does not look like a
        flag), and so is the next argument of an unknown flag without `=` whose name `takes_value`,
        as Go's flag package reads `-logLevel -1`. A short flag of ours that takes a value may hold
        it (`-ojson`); nothing combines short flags.
        """
        found: list[Unknown] = []
        index = 0
        while index < len(argv) and argv[index] != "--":
            argument, index = argv[index], index + 1
            if not _looks_like_flag(argument):
                continue
            given, equals, _ = argument.partition("=")
            action = self._option_string_actions.get(given)
            attached = None if argument.startswith("--") else self._option_string_actions.get(argument[:2])
            if action is None and attached is not None and attached.nargs != 0:
                continue  # -ojson
            if action is None:
                found.append(Unknown(given, given.lstrip("-")))
            if equals or index == len(argv):
                continue
            if action is None:
                index += takes_value(given.lstrip("-"))
            elif action.nargs == "?":
                index += not _looks_like_flag(argv[index])
            else:
                index += action.nargs != 0
        return found

    def add_flag_group(self, title: str, description: str | None = None) -> FlagGroup:
        return FlagGroup(self, self.add_argument_group(title, description))

    def declare(
        self, add: Callable[..., argparse.Action], names: tuple[str, ...], kwargs: dict[str, Any]
    ) -> argparse.Action:
        long = next((n for n in names if isinstance(n, str) and n.startswith("--")), None)
        if long is None or kwargs.get("action") in ("help", "version"):
            return add(*names, **kwargs)
        hidden = kwargs.get("help") is argparse.SUPPRESS  # accepted for old manifests, neither listed nor suggested
        if not hidden:
            self.flags.append(long)
        flag = long[2:]
        owner = kwargs.pop("twin_owner", None)
        variables = () if owner else (env_name(flag), *ENV_ALIASES.get(flag, ()))
        if kwargs.get("action") not in (None, "store", "store_true", "append"):
            raise TypeError(f"{long}: only store, store_true and append flags get environment twins")
        switch = kwargs.get("action") == "store_true"
        repeated = kwargs.get("action") == "append"
        kwargs["action"] = _Switch if switch else _Append if repeated else _Given
        shown = kwargs.pop("shown_default", "off" if switch else _shown(kwargs.get("default")))
        if not hidden:
            env = f"none, {env_name(flag)} is {owner}'s" if owner else " or ".join(variables)
            kwargs["help"] = _help(kwargs.get("help") or "", shown, env)
        if switch:
            kwargs.setdefault("default", False)
        source = self._environment_source(variables)
        if source is not None:
            self.from_environment[long] = source
            text = self.environ[source]
            value = _environment_value(source, text, long if switch else None, kwargs.get("type"))
            kwargs["default"] = [value] if repeated and not isinstance(value, BadEnvironment) else value
        return add(*names, **kwargs)

    def _environment_source(self, variables: tuple[str, ...]) -> str | None:
        if not variables:
            return None
        twin, *aliases = variables
        if twin in self.environ:
            return twin
        return next((alias for alias in aliases if self.environ.get(alias)), None)


class FlagGroup:
    """An argument group whose flags get the parser's environment twins and help."""

    def __init__(self, parser: FlagParser, group: argparse._ArgumentGroup) -> None:
        self._parser, self._group = parser, group

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        return self._parser.declare(self._group.add_argument, names, kwargs)


def _shown(default: Any) -> str:
    return "none" if default is None else str(default)


def _help(description: str, shown: str, env: str) -> str:
    # Help strings are %-formatted by argparse.
    default = "" if "default" in description else f"default: {shown}; "
    return f"{description} ({default}env: {env})".replace("%", "%%")


def _environment_value(
    variable: str, text: str, switch: str | None, convert: Callable[[str], Any] | None
) -> Any | BadEnvironment:
    """The default `variable` gives a flag: converted by the flag's checker, or the reason it is
    refused."""
    if switch is not None:
        word = text.strip().lower()
        if word not in TRUE_WORDS | FALSE_WORDS:
            return BadEnvironment(variable, text, f"{switch} takes true or false")
        return word in TRUE_WORDS
    try:
        return convert(text) if convert is not None else text
    except (argparse.ArgumentTypeError, ValueError) as error:
        return BadEnvironment(variable, text, str(error))


def parser_class_for(environ: Mapping[str, str]) -> type[FlagParser]:
    """`FlagParser` bound to `environ`, for argparse to build the sub-command parsers with."""

    class Parser(FlagParser):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, environ=environ, **kwargs)

    return Parser
