"""Evaluation outside the LightningModule: any policy against any policy, with intervals,
and exploitability where OpenSpiel has the game."""
