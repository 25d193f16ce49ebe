"""The health check on vocabularies with permuted special ids matches the base model's."""

from __future__ import annotations

from helpers import base_fixture, case_fixture  # noqa: F401 (fixtures: base, case)

from attnviz import analysis


def test_health_check_matches(base, case):
    _, ckpt, _ = case
    texts = ["helloworld", "abc", "qwertyuiopasdf", "zz"]
    ra = analysis.check(base, texts, ablation_sample=4)
    rb = analysis.check(ckpt, texts, ablation_sample=4)
    assert [(f.level, f.message) for f in rb.findings] == [
        (f.level, f.message) for f in ra.findings
    ]
