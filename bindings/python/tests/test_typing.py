# SPDX-License-Identifier: Apache-2.0
"""The package's types: mypy --strict (pyproject.toml's [tool.mypy]) passes on the package
and on tests/typed/usage.py, catches wrong uses of results, and sees no public method
returning Any; usage.py runs against the real binary."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentstate_client import AsyncClient, AsyncWatch, Client, Watch

PACKAGE_DIR = Path(__file__).resolve().parent.parent   # bindings/python
USAGE = PACKAGE_DIR / "tests" / "typed" / "usage.py"


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def run_mypy(cache: Path, *targets: str | Path) -> subprocess.CompletedProcess[str]:
    """mypy with the package's configuration, from bindings/python (so that the
    agentstate_client being checked is this one), its cache outside the source tree."""
    probe = subprocess.run([sys.executable, "-c", "import mypy"], capture_output=True)
    if probe.returncode != 0:
        pytest.fail(f"mypy is not installed for {sys.executable}: run tools/setup.sh --all")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(PACKAGE_DIR / "pyproject.toml"),
         "--cache-dir", str(cache), "--no-error-summary", "--show-error-codes",
         *map(str, targets)],
        cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=300)


def test_mypy_strict_passes_on_package_and_usage(mypy_cache):
    r = run_mypy(mypy_cache, "agentstate_client", USAGE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""


def test_mypy_catches_wrong_uses_of_results(mypy_cache, tmp_path):
    # Each line misuses one result; a result typed Any would let it through.
    wrong = {
        "v1: str = c.create_session('a', 'u')['version']": "assignment",
        "v2: int = c.get_session('a', 'u', 's')['version']": "index",  # may be None
        "v3: str = c.get_user_state('a', 'u', with_cursor=True)['state']": "assignment",
        "v4: int = c.append_event('a', 'u', 's', {})['event']['id']": "assignment",
        "v5: str = c.read_changes('all')['changes'][0]['version']": "assignment",
        "v6: int = c.list_sessions('a')['next_page_token']": "assignment",
        "v7: str = c.list_invocations('a', 'u', 's')[0]['events']": "assignment",
        "v8: int = c.ping()": "assignment",
        "v9: str = c.stats()['appends']": "assignment",
        "c.create_session('a', 'u', state=1)": "arg-type",
        "c.no_such_method()": "attr-defined",
    }
    lines = ["from agentstate_client import Client", "", "def f(c: Client) -> None:"]
    lines += [f"    {code}" for code in wrong]
    lines += ["", "async def g(c: 'AsyncClient') -> None:",
              "    w1: str = (await c.get_app_state('a', with_cursor=True))['cursor']",
              "    w2: int = w1",
              "    async for batch in await c.watch('all'):",
              "        w3: str = batch['changes'][0]['version']",
              "from agentstate_client import AsyncClient"]
    bad = tmp_path / "wrong_uses.py"
    bad.write_text("\n".join(lines) + "\n")
    r = run_mypy(mypy_cache, bad)
    assert r.returncode == 1, r.stdout + r.stderr
    flagged = {int(m.group(1)): m.group(2)
               for m in re.finditer(r"wrong_uses\.py:(\d+): error: .*\[([a-z-]+)\]$",
                                    r.stdout, re.M)}
    for n, (code, expected) in enumerate(wrong.items(), start=4):
        assert flagged.get(n) == expected, f"line {n} {code!r}: {flagged.get(n)!r}\n{r.stdout}"
    first_async = 4 + len(wrong) + 2
    assert flagged.get(first_async + 1) == "assignment", r.stdout   # w2 = w1 (str)
    assert flagged.get(first_async + 3) == "assignment", r.stdout   # w3


def public_methods(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n)))


def test_no_public_method_returns_any(mypy_cache, tmp_path):
    classes = {"AsyncClient": AsyncClient, "Client": Client, "AsyncWatch": AsyncWatch,
               "Watch": Watch}
    names = [(c, n) for c, cls in classes.items() for n in public_methods(cls)]
    assert ("Client", "create_session") in names and ("AsyncClient", "watch") in names
    src = ["from agentstate_client import AsyncClient, AsyncWatch, Client, Watch"]
    src += [f"reveal_type({c}.{n})" for c, n in names]
    probe = tmp_path / "reveal.py"
    probe.write_text("\n".join(src) + "\n")
    r = run_mypy(mypy_cache, probe)
    revealed = re.findall(r"reveal\.py:(\d+): note: Revealed type is \"(.*)\"$", r.stdout, re.M)
    assert len(revealed) == len(names), r.stdout + r.stderr
    for (line, text), (c, n) in zip(revealed, names):
        # Every signature's (each overload's) result after its "->" (mypy omits "-> None");
        # a coroutine's own Coroutine[Any, Any, T] parameters are not results.
        assert text.startswith(("def ", "Overload(def ")), f"{c}.{n}: {text}"
        returns = re.findall(r"-> (.*?)(?=, def |\)$|$)", text)
        for ret in returns:
            ret = re.sub(r"typing\.Coroutine\[Any, Any, ", "", ret)
            assert not re.search(r"\bAny\b", ret), f"{c}.{n} returns {ret}"


def test_typed_usage_runs(agentstate_bin, tmp_path):
    spec = importlib.util.spec_from_file_location("agentstate_typed_usage", USAGE)
    assert spec is not None and spec.loader is not None
    usage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(usage)
    ids, version, missing_kind = usage.run_all(agentstate_bin, str(tmp_path / "no-such-binary"))
    assert ids == ["e1"]
    assert version == 1
    assert missing_kind == "spawn_failed"
