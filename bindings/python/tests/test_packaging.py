# SPDX-License-Identifier: Apache-2.0
"""bindings/python as a package: it installs offline into a fresh virtual environment
with the system's setuptools (pip --no-build-isolation --no-index), the installed copy
imports, carries py.typed and its license, type-checks its user, and talks to the real
binary; its version is the release's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent.parent   # bindings/python
REPO_ROOT = PACKAGE_DIR.parent.parent

# Run by the venv's interpreter: one call against the binary, and where the package is.
SMOKE = """
import json, sys
import agentstate_client
from agentstate_client import Client
with Client.spawn(memory=True, binary=sys.argv[1]) as c:
    s = c.create_session("app", "u", "s1", {"k": 1})
    r = c.append_event("app", "u", "s1", {"id": "e1", "author": "a"})
print(json.dumps({"file": agentstate_client.__file__, "state": s["state"],
                  "version": r["version"]}))
"""


def test_version_is_the_release_version():
    meta = tomllib.loads((PACKAGE_DIR / "pyproject.toml").read_text())["project"]
    cmake = (REPO_ROOT / "CMakeLists.txt").read_text()
    release = re.search(r"project\(agentstate VERSION (\S+)", cmake)
    assert release is not None
    assert meta["version"] == release.group(1)
    assert meta["license"] == {"text": "Apache-2.0"}
    assert (PACKAGE_DIR / "LICENSE").read_text() == (REPO_ROOT / "LICENSE").read_text()


def test_pip_installs_offline_into_a_fresh_venv(agentstate_bin, tmp_path):
    # A copy of the sources: pip builds in the tree it is given (build/, *.egg-info),
    # which must not be the source tree. The LICENSE link is copied as the file.
    src = tmp_path / "src"
    shutil.copytree(PACKAGE_DIR, src,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build",
                                                  ".pytest_cache", ".mypy_cache"))
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
    env["PIP_NO_INPUT"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True, timeout=120)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-cache-dir", str(src)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr

    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    installed = site / "agentstate_client"
    assert (installed / "py.typed").is_file()
    assert (installed / "results.py").is_file()
    dist = next(site.glob("agentstate_client-*.dist-info"))
    metadata = (dist / "METADATA").read_text()
    assert "License: Apache-2.0" in metadata and "Requires-Python: >=3.11" in metadata
    assert (dist / "LICENSE").read_text() == (REPO_ROOT / "LICENSE").read_text()

    # From a directory without the sources: the installed copy is the one imported.
    r = subprocess.run([str(py), "-c", SMOKE, agentstate_bin], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = __import__("json").loads(r.stdout)
    assert Path(out["file"]).resolve().is_relative_to(site.resolve())
    assert out["state"] == {"k": 1} and out["version"] == 1

    # py.typed makes the installed package's types visible to a user's mypy.
    probe = subprocess.run([sys.executable, "-c", "import mypy"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"mypy is not installed for {sys.executable}: run tools/setup.sh --all")
    user = tmp_path / "user.py"
    user.write_text("from agentstate_client import Client\n"
                    "def f(c: Client) -> str:\n"
                    "    return c.create_session('a', 'u')['version']\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--python-executable",
                        str(py), "--cache-dir", str(tmp_path / "mypy-cache"), str(user)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'Incompatible return value type (got "int", expected "str")' in r.stdout, r.stdout
