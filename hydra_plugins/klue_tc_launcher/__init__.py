"""klue_tc's parallel launcher (`hydra/launcher=parallel`): sweep jobs in worker processes on
this machine, `jobs_per_gpu` workers pinned to each visible GPU, or `n_jobs` CPU workers.

It lives in Hydra's `hydra_plugins` namespace package because Hydra only instantiates launchers
found there.
"""
