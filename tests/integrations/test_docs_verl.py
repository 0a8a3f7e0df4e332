"""The GRPO launch command in docs/integrations.md is valid for the verl under test: its overrides
compose with verl's own Hydra config and turn on the trackstore logger and trace backend."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from ..helpers import REPO

pytest.importorskip("verl", reason="verl is not installed (run `make test-frameworks`)")


def doc_command() -> list[str]:
    text = (REPO / "docs" / "integrations.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "verl.trainer.main_ppo" in b)
    command = block[block.index("python3 -m verl.trainer.main_ppo"):].replace("\\\n", " ")
    return shlex.split(os.path.expandvars(command))


def test_documented_grpo_command_composes_with_verls_config():
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    argv = doc_command()
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    overrides = argv[3:]
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    config = OmegaConf.to_container(cfg, resolve=True)
    assert config["trainer"]["logger"] == ["console", "trackstore"]
    trace = config["actor_rollout_ref"]["rollout"]["trace"]
    assert (trace["backend"], trace["token2text"], trace["project_name"]) == (
        "trackstore", True, "verl_grpo_example_gsm8k")
    assert config["actor_rollout_ref"]["rollout"]["mode"] == "async"  # traces need the agent loop
    assert config["trainer"]["log_val_generations"] == 10
