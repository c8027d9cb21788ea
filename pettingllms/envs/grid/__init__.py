"""What the grid envs (sudoku, sokoban, plan_path) share: the tool/plan turn logic and rewards
(env.py), reading actions (actions.py), drawing states as text (render.py) and building seeded
train/test splits (splits.py)."""
