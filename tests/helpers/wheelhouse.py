"""Wheels of what a built wheel requires, packed from this environment's installed distributions, and fresh
virtual environments pip installs into from them alone (no index, no network).

The test environment is installed from the hashed lock file, so the wheels hold the locked versions. A
distribution is packed as pip installed it: its files as its RECORD lists them, less the byte code and the
scripts, which pip writes anew from the entry points on install.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Collection, Iterable, Mapping
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_REWRITTEN = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
"""What pip writes itself in a dist-info directory when it installs."""


def wheel_metadata(wheel: Path) -> Mapping[str, list[str]]:
    """A wheel's METADATA fields, each with all its values (`Requires-Dist`, `Provides-Extra`...)."""
    with zipfile.ZipFile(wheel) as opened:
        [name] = [item for item in opened.namelist() if item.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(opened.read(name).decode())
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return fields


def _applies(requirement: Requirement, extras: Collection[str]) -> bool:
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in {"", *extras})


def reached(requires: Iterable[str], extras: Collection[str] = ()) -> list[metadata.Distribution]:
    """The installed distributions that requirements reach (a wheel's `Requires-Dist`, with `extras` asked)."""
    asked: dict[str, set[str]] = {}
    found: dict[str, metadata.Distribution] = {}
    pending = [requirement for requirement in map(Requirement, requires) if _applies(requirement, extras)]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in asked and set(requirement.extras) <= asked[name]:
            continue
        asked[name] = asked.get(name, set()) | set(requirement.extras)
        distribution = found.setdefault(name, metadata.distribution(name))
        pending.extend(
            needed for needed in map(Requirement, distribution.requires or []) if _applies(needed, asked[name])
        )
    return list(found.values())


def _filename(distribution: metadata.Distribution) -> str:
    wheel = distribution.read_text("WHEEL") or ""
    tags = [line.partition(":")[2].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    parts = (".".join(sorted({tag.split("-")[index] for tag in tags})) for index in range(3))
    name = canonicalize_name(distribution.metadata["Name"]).replace("-", "_")
    return f"{name}-{distribution.version}-{'-'.join(parts)}.whl"


def pack(distribution: metadata.Distribution, into: Path) -> Path:
    """The installed `distribution` as a wheel in `into`, its RECORD written anew."""
    root = Path(str(distribution.locate_file("")))
    files = distribution.files
    assert files, f"{distribution.metadata['Name']} lists no files (no RECORD): it cannot be packed"
    target = into / _filename(distribution)
    record: list[str] = []
    info = ""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel:
        for file in files:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            if file.parts[0].endswith(".dist-info"):
                info = file.parts[0]
                if file.name in _REWRITTEN:
                    continue
            data = (root / file).read_bytes()
            wheel.writestr(str(file), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{file},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return target


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without what would reach past a fresh virtual environment: the worktree on
    `PYTHONPATH`, an active environment, pip's configuration, mcp-elicit's own settings, coverage's start-up
    (which the fresh environment has no coverage for)."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_", "MCP_ELICIT_", "COVERAGE_")
    kept = {name: value for name, value in os.environ.items() if not name.startswith(dropped)}
    return {**kept, **extra}


class FreshEnvironment:
    """A virtual environment made without pip; this interpreter's pip installs into it (`pip --python`)."""

    def __init__(self, path: Path, *, on_top_of: FreshEnvironment | None = None) -> None:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
        self.path = path
        self.python = path / "bin" / "python"
        self.site_packages = Path(self.run("-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
        if on_top_of is not None:
            # Read-only below this environment's own packages, as --system-site-packages would add the system's.
            (self.site_packages / "on_top_of.pth").write_text(f"{on_top_of.site_packages}\n")

    def install(self, *requirements: str, find_links: Iterable[Path]) -> str:
        """pip's own resolution and install from the wheels in `find_links` only; what pip says it installed."""
        links = [argument for folder in find_links for argument in ("--find-links", str(folder))]
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--python", str(self.python),
             "install", "--no-index", "--no-compile", *links, *requirements],
            capture_output=True, text=True, env=clean_environment(), timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        [installed] = [line for line in done.stdout.splitlines() if line.startswith("Successfully installed")]
        return installed

    def run(self, *arguments: str, command: str = "python", **extra: str) -> str:
        """A command of this environment (`python` or a script in its bin), which must succeed; its stdout."""
        done = self.attempt(*arguments, command=command, **extra)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def attempt(self, *arguments: str, command: str = "python", **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.path / "bin" / command), *arguments],
            capture_output=True, text=True, env=clean_environment(**extra), timeout=120, check=False,
            cwd=self.path,
        )  # fmt: skip
