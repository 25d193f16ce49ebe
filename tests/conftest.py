"""Shared fixtures: tiny random models and the shipped reversal model."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest
import torch

import attnviz

MODELS = Path(__file__).resolve().parent.parent / "models"


def make_model(seed: int = 0, **overrides) -> attnviz.Transformer:
    """A tiny random model in eval mode with dropout off."""
    base = dict(
        src_vocab_size=23,
        tgt_vocab_size=19,
        d_model=24,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=40,
        dropout=0.0,
        max_len=200,
    )
    base.update(overrides)
    torch.manual_seed(seed)
    return attnviz.Transformer(attnviz.ModelConfig(**base)).eval()


def random_batch(model: attnviz.Transformer, b: int = 3, ts: int = 7, tt: int = 6, seed: int = 1):
    """Source/target ids (ids >= 3) with PAD (0) at the end of some source and target rows."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    src = torch.randint(3, cfg.src_vocab_size, (b, ts), generator=g)
    tgt = torch.randint(3, cfg.tgt_vocab_size, (b, tt), generator=g)
    if b > 1:
        src[1, ts - 3 :] = cfg.pad_id
        tgt[1, tt - 2 :] = cfg.pad_id
    return src, tgt, src == cfg.pad_id, tgt == cfg.pad_id


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


def letters(text: str) -> list[int]:
    """a-z text -> ids of the character tasks (reverse, copy, sort)."""
    return attnviz.tasks.get_task("reverse").tokenizers()[0].encode(text).ids


def unletters(ids) -> str:
    """Ids of the character tasks -> text (stops at EOS)."""
    return attnviz.tasks.get_task("reverse").tokenizers()[1].decode(ids)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launched_app(model: str | Path | None = None, **build):
    """The app on ``model`` (default models/reverse), launched in this process on a free
    port; yields ``(demo, port)`` and closes it afterwards."""
    from attnviz.app import server, ui

    demo = ui.build_app(str(model or MODELS / "reverse"), "cpu", **build)
    demo.queue()
    port = free_port()
    demo.launch(prevent_thread_lock=True, **server.launch_kwargs(port=port))
    try:
        yield demo, port
    finally:
        demo.close()


# -- fixtures for the helpers above (tests take these, never `from tests.conftest import`) ------
@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The shipped checkpoints folder (``models/``)."""
    return MODELS


@pytest.fixture(scope="session", name="make_model")
def make_model_fixture():
    """Factory: ``make_model(seed=0, **config_overrides)`` -> tiny random model in eval mode."""
    return make_model


@pytest.fixture(scope="session", name="random_batch")
def random_batch_fixture():
    """Factory: ``random_batch(model, b, ts, tt, seed)`` -> src, tgt, src_pad, tgt_pad."""
    return random_batch


@pytest.fixture(scope="session", name="letters")
def letters_fixture():
    return letters


@pytest.fixture(scope="session", name="unletters")
def unletters_fixture():
    return unletters


@pytest.fixture(scope="session", name="free_port")
def free_port_fixture():
    """Factory: ``free_port()`` -> a TCP port on 127.0.0.1 nothing listens on."""
    return free_port


@pytest.fixture(scope="session", name="launched_app")
def launched_app_fixture():
    """Context-manager factory: ``with launched_app(model=None, **build) as (demo, port)``."""
    return launched_app


# -- tiers (markers declared in pyproject.toml) ------------------------------------------------
#: Files whose every test belongs to a tier beyond the fast unit tier.
TIERS = {
    "browser": {
        "test_app_browser.py", "test_report_browser.py", "test_app_load.py",
        "test_app_labs_browser.py",
    },
    "integration": {
        "test_app_server.py", "test_app_network.py", "test_app_hf.py", "test_hf.py",
        "test_cli.py", "test_train.py", "test_bench.py", "test_shipped_models.py",
        "test_hf_generation.py", "test_hf_hostile.py", "test_hf_tokenizers.py", "test_hostile.py",
        "test_train_corpus.py", "test_evaluate.py", "test_data_cli.py", "test_compare_cli.py",
        "test_finetune.py",
    },
}  # fmt: skip
BEYOND_UNIT = ("slow", "integration", "browser", "gpu")


def pytest_collection_modifyitems(items):
    """Mark each test with its tier: ``pytest -m unit`` is the fast tier (no slow, integration,
    browser or GPU tests); plain ``pytest`` still runs everything."""
    for item in items:
        for tier, files in TIERS.items():
            if item.path.name in files:
                item.add_marker(tier)
        if not any(item.get_closest_marker(m) for m in BEYOND_UNIT):
            item.add_marker("unit")
