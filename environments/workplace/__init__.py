"""The `workplace` environment: NeMo Gym's workplace_assistant tools over a local sandbox.

tools.py      the 27 tool schemas (ToolSpec), with NeMo Gym's read/write operation types
state.py      base state (seed or NeMo Gym CSV folder) and the copy-on-write Store
sandbox.py    the tool implementations
compare.py    end-state equality with NeMo Gym's semantics, and the state diff
verifier.py   WorkplaceVerifier
generator.py  synthetic task generation over the seed data
"""

from environments.workplace.environment import WorkplaceEnvironment
from environments.workplace.verifier import WorkplaceVerifier

__all__ = ["WorkplaceEnvironment", "WorkplaceVerifier"]
