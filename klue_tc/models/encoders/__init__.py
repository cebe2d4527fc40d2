"""Encoder variants: what each block puts after its self-attention, registered by name.

Every module here is imported by `klue_tc.core.registry.ENCODERS` the first time it is read; a new
encoder is one new module with `@ENCODERS.register("name", NameConfig)` (README: Add an encoder),
its sub-layers `klue_tc.models.blocks.Sublayer`s.
"""
