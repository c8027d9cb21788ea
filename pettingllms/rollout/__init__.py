"""Rollout: engines (engines/), the episode loop (runner.py) with its strategies (strategies/),
and MetaAgent-X's designs x executions (autoevol.py). `trainer.assemble.make_runner` picks the
runner that `RolloutSettings.strategy` names."""
