"""Training process: models, rollouts, GRPO-family losses, SFT, DPO, evaluation, checkpoints.

Pure PyTorch + transformers + PEFT; never imports Django. `training.config` imports no
torch so that the web app can validate run configs without it.
"""
