"""Titles read and normalised, folded, gathered into the pretraining corpus and batched."""
