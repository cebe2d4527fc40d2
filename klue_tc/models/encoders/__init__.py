"""Encoder variants: what each block puts after its self-attention, registered by name.

Every module here is imported by `klue_tc.registry.ENCODERS` the first time it is read; a new
encoder is one new module with `@ENCODERS.register("name", NameConfig)` (README: Add an encoder).
The built-ins are imported first, in the study's order, which the report's rows follow.
"""

# isort: off
from klue_tc.models.encoders import transformer, trans_blstm, trans_blstm_parallel, cnn  # noqa: F401
# isort: on
