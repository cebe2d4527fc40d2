"""The best classifier a sweep's records make together: fold and cross-design ensembles with the
linear baselines as candidate members, everything chosen on out-of-fold predictions only.

    python -m klue_tc.ensemble outputs/sweeps/ensemble [--validation FILE] [--wandb]

members.py reads the candidates from the records, linear.py fits the baselines on the same folds,
calibration.py and selection.py choose temperatures and weights, stage.py puts them together and
scoring.py scores them on the validation titles; report.py writes ensemble.md and ensemble.csv,
artefact.py the folder `python -m klue_tc.predict` serves (serving.py runs the fold models; convert.py
rewrites an older version's pickled models once, `python -m klue_tc.predict --convert DIR`).
"""
