"""The alert rules file passes ``promtool check rules`` and its own ``promtool test rules``."""

from __future__ import annotations

from .conftest import REPO, run_promtool

RULES_DIR = REPO / "deploy" / "prometheus"


def test_rules_are_valid(promtool: str) -> None:
    output = run_promtool(promtool, "check", "rules", str(RULES_DIR / "gannet-rules.yml"))
    assert "SUCCESS" in output


def test_rules_fire_on_faults_and_stay_silent_otherwise(promtool: str) -> None:
    output = run_promtool(promtool, "test", "rules", str(RULES_DIR / "gannet-rules.test.yml"))
    assert "SUCCESS" in output
