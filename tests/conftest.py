"""Shared fixtures: tiny random models and the shipped reversal model."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers.py, hf_families.py
from helpers import MODELS, make_model, tracked_changes  # noqa: E402

import attnviz

TRACKED = pytest.StashKey["dict[str, str] | None"]()


@pytest.fixture(autouse=True, scope="module")
def _models_run_in_this_process_again():
    """A module that started the app's server in this process (``server.main``) leaves no
    worker pool or decoder budget behind for the next module: they belong to a server, and
    the library and the other tests run models in this process."""
    yield
    app = sys.modules.get("attnviz.app.workers")
    if app is not None and app.pool() is not None:
        app.configure(None)
    decoders = sys.modules.get("attnviz.app.decoders")
    if decoders is not None:
        decoders.DECODERS.budget = None


@pytest.fixture
def model() -> attnviz.Transformer:
    return make_model()


@pytest.fixture(scope="session")
def reverse_ckpt() -> attnviz.Checkpoint:
    """The shipped model that reverses a-z strings of length 1-20 (ids: PAD 0, BOS 1, EOS 2)."""
    return attnviz.load_checkpoint(MODELS / "reverse")


@pytest.fixture(scope="session")
def reverse_model(reverse_ckpt) -> attnviz.Transformer:
    return reverse_ckpt.model


# -- fixtures (plain helpers live in helpers.py: `from helpers import make_model`) ------------
@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The shipped checkpoints folder (``models/``)."""
    return MODELS


@pytest.fixture(scope="module")
def url(models_dir):
    """The address of an app serving the shipped ``models/reverse`` (one per test module)."""
    from helpers import launched_app

    with launched_app(models_dir / "reverse") as (_, port):
        yield f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (the system one, as ``attnviz bench`` drives it), per test module."""
    from helpers import CHROMIUM, browser_or_skip

    from attnviz.bench.suite import CHROMIUM_ARGS

    with browser_or_skip().sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


# -- tiers (markers declared in pyproject.toml) ------------------------------------------------
#: Directories whose every test belongs to a tier beyond the fast unit tier (tests/unit).
TIERS = ("integration", "browser")
BEYOND_UNIT = ("slow", "integration", "browser", "gpu")


def pytest_collection_modifyitems(items):
    """Mark each test with its tier, read from its directory (tests/unit, tests/integration,
    tests/browser): ``pytest -m unit`` is the fast tier (no slow, integration, browser or GPU
    tests); plain ``pytest`` still runs everything."""
    for item in items:
        if item.path.parent.name in TIERS:
            item.add_marker(item.path.parent.name)
        if not any(item.get_closest_marker(m) for m in BEYOND_UNIT):
            item.add_marker("unit")


# -- the suite writes only to temporary folders --------------------------------------------------
ROOT = MODELS.parent


def pytest_sessionstart(session):
    session.config.stash[TRACKED] = tracked_changes(ROOT)


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a test changed a tracked file (a README screenshot, ``load_test.json``):
    tests write to temporary folders; ``ATTNVIZ_SHOTS=<folder>`` is the explicit way to keep
    screenshots, and what it names is left out of this check."""
    before = session.config.stash.get(TRACKED, None)
    after = tracked_changes(ROOT)
    if before is None or after is None:
        return
    shots = os.environ.get("ATTNVIZ_SHOTS")
    kept = Path(shots).resolve() if shots else None
    changed = sorted(
        name for name, digest in after.items()
        if before.get(name) != digest and not (kept and (ROOT / name).resolve().is_relative_to(kept))
    )  # fmt: skip
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                "the test run changed tracked files (tests must write to tmp folders): "
                + ", ".join(changed),
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
